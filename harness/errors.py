"""Errors a person can act on: one line, what is wrong, the value given, what is accepted.

The engine raises these; the CLI (``bench.cli.main``) prints them as one line and exits with
``exit_code`` (2: bad usage, 1: a failure), with the traceback only under ``--debug``.
"""


class BenchError(Exception):
    """A failure reported as one line, without a traceback. ``exit_code`` 2 means bad usage."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class UsageError(BenchError):
    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=2)
