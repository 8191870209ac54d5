"""``python -m verify DIR ...``: the same as ``streamslo verify DIR ...`` (same exit codes)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["run"]


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` like ``streamslo verify`` and run it.

    Args:
        argv: the arguments after ``verify`` (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 pass, 99 a threshold failed, 2 bad input, 1 internal error.
    """
    from streamslo.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, BadInputError
    from streamslo.verify.runner import add_verify_arguments, verify

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            self.print_usage(sys.stderr)
            self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")

    parser = _Parser(prog="streamslo verify", description=__doc__)
    add_verify_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return verify(args)
    except BadInputError as exc:
        print(f"streamslo verify: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # the exit code says "internal"; the traceback says why
        import traceback

        traceback.print_exc()
        print(f"streamslo verify: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(run())
