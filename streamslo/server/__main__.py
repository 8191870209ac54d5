"""``python -m streamslo.server``: the same as ``streamslo serve``, without the other commands."""

from __future__ import annotations

import argparse
import logging
import sys

from streamslo.server import launch

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` with :func:`launch.add_serve_arguments` and run :func:`launch.serve`."""
    parser = argparse.ArgumentParser(prog="python -m streamslo.server", description=__doc__)
    launch.add_serve_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return launch.serve(args)


if __name__ == "__main__":
    sys.exit(main())
