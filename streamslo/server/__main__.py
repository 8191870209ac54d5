"""``python -m streamslo.server``: the same as ``streamslo serve``, without the other commands."""

from __future__ import annotations

import argparse
import logging
import sys

from streamslo.server import launch

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` with :func:`launch.add_arguments` and run :func:`launch.main`."""
    parser = argparse.ArgumentParser(prog="python -m streamslo.server", description=__doc__)
    launch.add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return launch.main(args)


if __name__ == "__main__":
    sys.exit(main())
