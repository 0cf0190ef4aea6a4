"""User-facing errors: a message naming what failed and a hint saying what to do."""

from __future__ import annotations


class UklError(Exception):
    """An error the user can act on; the CLI prints it without a traceback."""

    def __init__(self, message: str, hint: str | None = None, code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code
