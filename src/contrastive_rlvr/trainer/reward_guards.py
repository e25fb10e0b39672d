"""Reward guarding: what each reward function returns, checked, and non-finite rewards.

Rewards. TRL turns a reward function's ``None`` (row not scored) into NaN, so a
NaN in the reward tensor cannot tell "not scored" from "returned NaN". Hence two
layers:

- :class:`GuardedReward` wraps each reward function and checks what it returns:
  one value per completion, each a real number or None. A string or another type
  is a :class:`RewardTypeError` naming the function, the row and the value. A
  returned NaN or +-inf is a :class:`NonFiniteRewardError` naming the function and
  the row (``on_nonfinite="error"``, the default), or, with
  ``on_nonfinite="skip_group"``, is passed on as ``+inf``: the marker of "returned
  a non-finite value", distinct from TRL's NaN for None.
- :func:`check_rewards` checks the gathered ``(B, n_funcs)`` reward tensor: an
  infinite entry is an error naming the function and the row, or, with
  ``skip_group``, the whole group of that row is skipped (its rewards set to 0,
  its rows returned so the trainer gives them no advantage) and counted. NaN stays
  TRL's "not scored".
"""

from __future__ import annotations

import copy
import logging
import math
import numbers
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch

from ..errors import NonFiniteRewardError, RewardExitError, RewardTimeoutError, RewardTypeError

logger = logging.getLogger(__name__)

NonFinitePolicy = Literal["error", "skip_group"]
NONFINITE_POLICIES: tuple[str, ...] = get_args(NonFinitePolicy)
#: Returned by a guarded reward for a non-finite value under ``skip_group``.
NONFINITE_MARKER = math.inf
_PREVIEW_CHARS = 60


#: Reward keyword arguments that are the trainer's objects, not rows: passed as they are.
_SHARED_KWARGS = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})
#: The largest float32: TRL holds rewards in a float32 tensor, so a larger finite value
#: would become inf there and be reported as non-finite.
FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def _preview(text: Any) -> str:
    text = str(text)
    return repr(text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "...")


def _check_policy(on_nonfinite: str) -> None:
    if on_nonfinite not in NONFINITE_POLICIES:
        raise ValueError(
            f"nonfinite_rewards={on_nonfinite!r} is invalid: choose one of "
            f"{', '.join(NONFINITE_POLICIES)}"
        )


class GuardedReward:
    """A reward function whose every output is checked (see the module docstring), and
    whose every call has a deadline of ``timeout`` seconds (None or 0: none; a function
    with its own per-answer deadlines, ``own_deadline = True`` as math_verify's, is not
    timed again): past it, :class:`RewardTimeoutError` names the function
    (:mod:`~contrastive_rlvr.rewards.deadline`).

    Keeps the wrapped function's ``__name__`` (TRL's metric keys use it) and
    forwards other attributes to it.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str,
        on_nonfinite: str = "error",
        timeout: float | None = None,
    ) -> None:
        _check_policy(on_nonfinite)
        self.fn, self.__name__, self.on_nonfinite = fn, name, on_nonfinite
        self.timeout = None if getattr(fn, "own_deadline", False) else timeout
        self.nonfinite = 0  # values passed on as the marker (skip_group)

    def __getattr__(self, attr: str) -> Any:
        fn = self.__dict__.get("fn")  # absent while copy/pickle rebuild the object
        if fn is None:
            raise AttributeError(attr)
        return getattr(fn, attr)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any):
        name = self.__name__
        # Each function gets its own copy of the rows: one that edits ``completions`` in
        # place must not change what the next function scores.
        rows = {k: v if k in _SHARED_KWARGS else copy.deepcopy(v) for k, v in kwargs.items()}
        from ..rewards.deadline import DeadlineExceeded, call_with_deadline

        cwd = os.getcwd()
        try:
            out = call_with_deadline(
                lambda: self.fn(  # as TRL calls it
                    prompts=copy.deepcopy(prompts), completions=copy.deepcopy(completions), **rows
                ),
                self.timeout,
                label=f"reward function {name!r}",
            )
        except DeadlineExceeded as err:
            raise RewardTimeoutError(
                f"reward function {name!r} did not return within reward_timeout="
                f"{err.seconds:g} s (one call, {len(completions)} completions); fix what it "
                "waits on, make it faster, or raise reward_timeout (0: no limit)"
            ) from None
        except SystemExit as err:
            raise RewardExitError(
                f"reward function {name!r} called sys.exit({err.code!r}): a reward function "
                "must return one float (or None) per completion, not end the process"
            ) from err
        finally:
            _stay_in(cwd, name)
        if isinstance(out, torch.Tensor):
            out = out.detach().cpu().reshape(-1).tolist()
        if isinstance(out, str | bytes) or not isinstance(out, (Sequence, *_array_types())):
            raise RewardTypeError(
                f"reward function {name!r} returned a {type(out).__name__}: it must return a "
                "list with one float (or None) per completion"
            )
        out = list(out)
        if len(out) != len(completions):
            raise RewardTypeError(
                f"reward function {name!r} returned {len(out)} values for {len(completions)} "
                "completions: it must return one per completion"
            )
        values: list[float | None] = []
        for row, value in enumerate(out):
            if value is None:
                values.append(None)
                continue
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            value = _numpy_scalar(value)  # numpy.bool_ is no numbers.Real: take its item
            if isinstance(value, str | bytes) or not isinstance(value, numbers.Real):
                raise RewardTypeError(
                    f"reward function {name!r} returned {type(value).__name__} {_preview(value)} "
                    f"for row {row} (completion {_preview(completions[row])}): return a float "
                    "per completion (or None for a row it does not score)"
                )
            huge = ""
            try:
                value = float(value)
            except OverflowError:  # an int such as 10**400: no float holds it
                huge = f" (an integer of {len(str(abs(value)))} digits, beyond any float)"
                value = math.inf if value > 0 else -math.inf
            if math.isfinite(value) and abs(value) > FLOAT32_MAX:
                raise NonFiniteRewardError(
                    f"reward function {name!r} returned {value:g} for row {row} (completion "
                    f"{_preview(completions[row])}): finite, but beyond the float32 range "
                    f"(|r| <= {FLOAT32_MAX:.3g}) of the trainer's reward tensor; scale the "
                    "reward down"
                )
            if not math.isfinite(value):
                if self.on_nonfinite == "error":
                    raise NonFiniteRewardError(
                        f"reward function {name!r} returned {value}{huge} for row {row} "
                        f"(completion {_preview(completions[row])}); fix the function, or set "
                        "nonfinite_rewards='skip_group' to skip such groups (counted)"
                    )
                self.nonfinite += 1
                value = NONFINITE_MARKER
            values.append(value)
        return values


def _stay_in(cwd: str, name: str) -> None:
    """Back to ``cwd`` when a reward function changed directory: the run's relative paths
    (output_dir, checkpoints, the dataset) must keep their meaning."""
    try:
        now = os.getcwd()
    except FileNotFoundError:  # it removed the directory it moved to
        now = None
    if now != cwd:
        logger.warning(
            "reward function %r changed the working directory to %s; changed back to %s",
            name,
            now,
            cwd,
        )
        os.chdir(cwd)


def _numpy_scalar(value: Any) -> Any:
    """A numpy scalar (``numpy.bool_``, ``numpy.float32``, a 0-d array) as the Python value
    it holds; anything else as it is."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with torch
        return value
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return value.item()
    return value


def _array_types() -> tuple[type, ...]:
    try:
        import numpy as np

        return (np.ndarray,)
    except ImportError:  # pragma: no cover - numpy comes with torch
        return ()


def guard_reward(
    fn: Callable[..., Any],
    name: str | None = None,
    on_nonfinite: str = "error",
    timeout: float | None = None,
) -> Any:
    """``fn`` wrapped in a :class:`GuardedReward` (``timeout``: its deadline per call);
    reward models (``nn.Module``), async functions and already guarded ones are returned
    as they are."""
    import inspect

    if isinstance(fn, GuardedReward | torch.nn.Module):
        return fn
    call = getattr(fn, "__call__", None)  # noqa: B004 - the callable class's own method
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call):
        return fn
    label = name or getattr(fn, "__name__", type(fn).__name__)
    return GuardedReward(fn, label, on_nonfinite, timeout)


def unique_names(names: list[str]) -> list[str]:
    """``names`` with each repeat of a name given a suffix (``score``, ``score_2``, ...),
    so that two reward functions of one name log under two metric keys
    (``rewards/<name>/mean``) instead of blending into one; the renaming is logged."""
    seen: dict[str, int] = {}
    taken = set(names)
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        if seen[name] == 1:
            out.append(name)
            continue
        k = seen[name]
        while f"{name}_{k}" in taken:
            k += 1
        taken.add(f"{name}_{k}")
        out.append(f"{name}_{k}")
        logger.warning(
            "two reward functions are named %r: the one at position %d logs as %r",
            name,
            len(out),
            out[-1],
        )
    return out


def guard_rewards(funcs: Any, on_nonfinite: str = "error", timeout: float | None = None) -> list:
    """Every callable of ``funcs`` (a list, or one function) through :func:`guard_reward`;
    what TRL loads itself (a reward model's id, a string) is left as it is."""
    funcs = list(funcs) if isinstance(funcs, list | tuple) else [funcs]
    return [
        guard_reward(f, on_nonfinite=on_nonfinite, timeout=timeout) if callable(f) else f
        for f in funcs
    ]


@dataclass
class RewardCheck:
    """Result of :func:`check_rewards`.

    Attributes:
        rewards: (B, n_funcs) rewards with the rows of skipped groups set to 0.
        skipped_rows: (B,) bool, True on every row of a skipped group.
        skipped_groups: how many groups were skipped.
    """

    rewards: torch.Tensor
    skipped_rows: torch.Tensor
    skipped_groups: int


def check_rewards(
    per_func: torch.Tensor,
    func_names: Sequence[str],
    *,
    group_size: int,
    on_nonfinite: str = "error",
) -> RewardCheck:
    """Check the gathered rewards (B, n_funcs) for infinite entries.

    NaN is TRL's "not scored" (the function returned None) and is left alone; +-inf
    comes from a function that returned inf, or, through :class:`GuardedReward`, any
    non-finite value. ``on_nonfinite="error"`` raises :class:`NonFiniteRewardError`
    naming the function and the row (its group ``row // G`` and place ``row % G``);
    ``"skip_group"`` zeroes the rewards of every group with such a row and returns
    those rows, for the trainer to give no advantage.
    """
    _check_policy(on_nonfinite)
    if per_func.dim() != 2 or per_func.size(1) != len(func_names):
        raise ValueError(f"per_func must be (B, {len(func_names)}), got {tuple(per_func.shape)}")
    bad = torch.isinf(per_func)  # (B, F)
    if not bad.any():
        rows = torch.zeros(per_func.size(0), dtype=torch.bool, device=per_func.device)
        return RewardCheck(per_func, rows, 0)
    if on_nonfinite == "error":
        row, col = (int(i) for i in bad.nonzero()[0])
        total = int(bad.any(dim=1).sum())
        raise NonFiniteRewardError(
            f"reward function {func_names[col]!r} returned a non-finite value "
            f"({float(per_func[row, col])}) for row {row} (group {row // group_size}, "
            f"completion {row % group_size}); {total} row(s) of this batch are affected; fix "
            "the function, or set nonfinite_rewards='skip_group' to skip such groups (counted)"
        )
    if per_func.size(0) % group_size != 0:
        raise ValueError(f"{per_func.size(0)} rows do not split into groups of {group_size}")
    groups = bad.any(dim=1).view(-1, group_size).any(dim=1)  # (B / G,)
    rows = groups.repeat_interleave(group_size)  # (B,)
    cleaned = per_func.clone()
    cleaned[rows] = 0.0
    return RewardCheck(cleaned, rows, int(groups.sum()))
