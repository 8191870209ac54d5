"""Exceptions and exit codes shared by every part of streamslo.

Exception tree::

    StreamSLOError                  base of everything streamslo raises on purpose
    ├── BadInputError               the user's input is wrong (exit code 2)
    │   ├── SLOFileError            an SLO file that does not parse (names file and line)
    │   ├── ResultsError            a results directory that is missing or damaged
    │   └── ServerExtraMissing      the bundled server is asked for without the 'server' extra
    └── ThresholdFailed             a threshold did not hold (exit code 99)

Exit codes follow k6: 0 every threshold held, 99 a threshold failed, 2 bad input,
1 an internal error.
"""

from __future__ import annotations

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_THRESHOLD",
    "BadInputError",
    "ResultsError",
    "SLOFileError",
    "ServerExtraMissing",
    "StreamSLOError",
    "ThresholdFailed",
]

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_THRESHOLD = 99


class StreamSLOError(Exception):
    """Base class of every error streamslo raises on purpose."""


class BadInputError(StreamSLOError):
    """The user's input is wrong: a usage error, a bad file, a bad value (exit code 2)."""


class SLOFileError(BadInputError):
    """An SLO file that does not parse. The message names the file and the line.

    Attributes:
        path: the file.
        line: 1-based line number, or None when the error is not tied to a line.
    """

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.detail = message
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")


class ResultsError(BadInputError):
    """A results directory, or a file in it, that is missing or damaged."""


class ServerExtraMissing(BadInputError):
    """The bundled server (``serve``, ``compare``, ``soak`` without a host, the pytest fixtures)
    is asked for, but the ``server`` extra is not installed. The message names the command."""


class ThresholdFailed(StreamSLOError):
    """A threshold did not hold (exit code 99)."""
