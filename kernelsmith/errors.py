"""Errors a user can act on: each names the file and, where there is one, the field."""

from __future__ import annotations


class KernelsmithError(Exception):
    """Base class for errors reported to the user without a traceback."""


class ConfigError(KernelsmithError):
    """A target yaml, harness or command-line value is wrong; says which file and field."""

    def __init__(self, file: object, message: str, field: str | None = None):
        self.file = str(file)
        self.field = field
        self.message = message
        where = f"{self.file}: {field}" if field else self.file
        super().__init__(f"{where}: {message}")
