"""``python -m streamslo.server``: the same as ``streamslo serve``, without the other commands
(its options are ``serve``'s own declaration, :class:`streamslo.commands.serve.ServeOptions`)."""

from __future__ import annotations

import argparse
import logging
import sys

from streamslo.commands import serve

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` as ``streamslo serve`` does and run the server."""
    parser = argparse.ArgumentParser(prog="python -m streamslo.server", description=__doc__)
    serve.add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return serve.main(args)


if __name__ == "__main__":
    sys.exit(main())
