"""The project's base error for mistakes in the user's input.

It lives at the bottom of the package so that every part (the trainer, evaluation, the
config groups, the CLI) raises the same type without importing another part.
"""

from __future__ import annotations


class UserError(ValueError):
    """A mistake in the user's input (a config value, a file, a path): the CLI prints it as
    one ``error: ...`` line and exits 2, without a traceback."""
