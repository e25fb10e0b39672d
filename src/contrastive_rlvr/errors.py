"""The project's errors: :class:`UserError` for mistakes in the user's input, and the
errors a run stops with (a reward that fails, an update that cannot be undone, a run
that learned nothing).

They live at the bottom of the package so that every part (the trainer, evaluation, the
config groups, the CLI) raises and catches the same types without importing another part.
"""

from __future__ import annotations


class UserError(ValueError):
    """A mistake in the user's input (a config value, a file, a path): the CLI prints it as
    one ``error: ...`` line and exits 2, without a traceback."""


class NonFiniteRewardError(UserError):
    """A reward function returned NaN or +-inf."""


class RewardTypeError(UserError):
    """A reward function returned something that is not a number or None."""


class NonFiniteParametersError(RuntimeError):
    """The parameters became non-finite after an optimizer step and no copy was kept."""


class AllUpdatesSkipped(RuntimeError):
    """Every optimizer step of the run was skipped or rolled back: nothing was learned."""


class NoTrainingSteps(RuntimeError):
    """The run ended without one optimizer step (too few training rows for a step)."""


class RewardTimeoutError(UserError):
    """A reward function call ran past ``reward_timeout``."""


class RewardExitError(RuntimeError):
    """A reward function called ``sys.exit`` (or raised ``SystemExit``): the run stops with
    an error naming it, never with the exit code the function chose."""
