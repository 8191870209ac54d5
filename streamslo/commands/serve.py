"""``streamslo serve``: the bundled PyTorch streaming target server (docs/server.md). The shell:
the options (:data:`streamslo.server.launch.SERVE_OPTIONS`) and the entry point;
:mod:`streamslo.server.launch` starts uvicorn or gunicorn."""

from __future__ import annotations

import argparse

from streamslo.server.launch import add_serve_arguments, serve

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``serve``'s options, grouped as ``streamslo serve --help`` shows them."""
    add_serve_arguments(p)


def main(args: argparse.Namespace) -> int:
    """``streamslo serve``: until SIGTERM/SIGINT (0 after a clean drain)."""
    return serve(args)
