"""What a command's failure means to a script: the exit codes and the error a command raises.

0 success, 1 the operation failed (or found violations), 2 bad usage or input, 3 the cluster
could not be reached. Commands raise ``CliError``; ``cli.main`` prints it without a traceback
and exits with its code.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


class CliError(Exception):
    """An error the user can act on; printed without a traceback."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code
