"""The recipe table: what ``grpo``, ``dapo``, ... mean here, in one place.

A recipe names its advantage estimator, its loss and its paper defaults.
Every recipe combines with the ``bicc`` switch (only the inputs of the policy
log-probs change) and the ``rcc`` switch (the baseline changes; for ConSPO,
which has no baseline, RCC moves the positive/negative cut from the fixed
threshold to the corrected baseline ``b*``, see :func:`recipe_advantages`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from .advantages import (
    DEFAULT_EPS,
    DEFAULT_RCC_BOUND,
    RccBound,
    group_advantages,
    rcc_advantages,
    rcc_baseline,
)
from .bicc import BiCCRatioMode
from .losses import get_policy_loss
from .ops import Tensor


@dataclass(frozen=True)
class Recipe:
    """One GRPO-family recipe.

    Attributes:
        name: the registry and CLI name.
        objective: ``"policy"`` (a clipped policy-gradient loss over advantages)
            or ``"contrastive"`` (ConSPO's InfoNCE over sequence scores).
        loss: the :data:`~contrastive_rlvr.algorithms.losses.POLICY_LOSSES` name
            (``None`` for the contrastive objective).
        scale_by_std: divide advantages by the group std (GRPO) or not (Dr.GRPO).
        beta: the paper's KL weight to the reference policy.
        dynamic_sampling: DAPO's refill of all-equal groups.
        overlong_punishment: DAPO's soft length penalty on the reward.
        paper: where the recipe comes from.
        summary: one line for the README and ``--help``.
        label: the name tables and figures print (``"Dr.GRPO"``); the name when empty.
        bicc_ratio_mode: the old log-probs of the ratio under BiCC when the user sets no
            ``bicc_ratio_mode`` (docs/bicc.md, "Ratio mode per recipe"), on both engines.
        trl_loss_type: TRL's ``loss_type`` when TRL's own loss computes this recipe
            (``None``: TRL has no such loss and the project's runs).
        trl_importance_sampling_level: TRL's ``importance_sampling_level`` with it.

    Every fact about a recipe lives here, so a recipe a user registers is listed by
    ``contrastive-rlvr recipes``, runs in ``compare`` and on both engines.
    """

    name: str
    objective: Literal["policy", "contrastive"]
    loss: str | None
    scale_by_std: bool
    beta: float
    paper: str
    summary: str
    dynamic_sampling: bool = False
    overlong_punishment: bool = False
    label: str = ""
    bicc_ratio_mode: BiCCRatioMode = "paper"
    trl_loss_type: str | None = None
    trl_importance_sampling_level: Literal["token", "sequence"] = "token"

    @property
    def display_label(self) -> str:
        """What tables and figures print for this recipe."""
        return self.label or self.name


RECIPES: dict[str, Recipe] = {}

_V = TypeVar("_V")


class RecipeFacts(Mapping[str, _V], Generic[_V]):
    """A read-only, always current view ``recipe name -> fact`` of :data:`RECIPES`.

    ``fact(recipe)`` returning ``None`` leaves the recipe out (e.g. no TRL route), so a
    table derived this way cannot drift from the registry.
    """

    def __init__(self, fact: Callable[[Recipe], _V | None]) -> None:
        self._fact = fact

    def _items(self) -> dict[str, _V]:
        out = {}
        for name, recipe in RECIPES.items():
            value = self._fact(recipe)
            if value is not None:
                out[name] = value
        return out

    def __getitem__(self, name: str) -> _V:
        return self._items()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __repr__(self) -> str:
        return f"RecipeFacts({self._items()!r})"


#: Called with every recipe registered (see :func:`on_recipe_registered`).
_LISTENERS: list[Callable[[Recipe], None]] = []


def register_recipe(recipe: Recipe) -> Recipe:
    """Add a recipe; a duplicate name or an unknown loss raises. Every listener of
    :func:`on_recipe_registered` hears of it."""
    if recipe.name in RECIPES:
        raise ValueError(f"recipe {recipe.name!r} is already registered")
    if recipe.objective == "policy":
        get_policy_loss(recipe.loss or "")
    RECIPES[recipe.name] = recipe
    for listener in _LISTENERS:
        listener(recipe)
    return recipe


def on_recipe_registered(listener: Callable[[Recipe], None]) -> None:
    """Call ``listener(recipe)`` for every recipe registered so far and for each one
    :func:`register_recipe` adds later: how an engine's own registry (verl's policy
    losses, ``crlvr_<recipe>``) follows this table, whichever is imported first. A
    listener given again is kept once."""
    if listener not in _LISTENERS:
        _LISTENERS.append(listener)
    for recipe in list(RECIPES.values()):
        listener(recipe)


def get_recipe(name: str) -> Recipe:
    """The recipe ``name``; an unknown name raises listing the valid ones."""
    try:
        return RECIPES[name]
    except KeyError:
        raise ValueError(f"unknown recipe {name!r}; valid: {', '.join(RECIPES)}") from None


def recipe_advantages(
    recipe: Recipe,
    rewards: Tensor,
    group_size: int,
    *,
    delta: Tensor | None = None,
    rcc_coef: float = 2.0,
    rcc_bound: RccBound = DEFAULT_RCC_BOUND,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """Per-row advantages of a policy recipe, RCC-corrected when ``delta`` is given.

    For the contrastive recipe this returns the per-row cut between positives
    and negatives instead: the RCC baseline ``b*`` when ``delta`` is given
    (ConSPO + RCC), else it raises (plain ConSPO uses a fixed threshold).

    Args:
        rewards: (B,). delta: (B,) log-prob shift for RCC, or None.
        rcc_coef: c of ``b* = mean(R) + c Cov(R, delta)``.
        rcc_bound: ``"reward_range"`` (clamp ``b*`` to the group's ``[min R, max R]``)
            or ``"none"`` (the paper's formula), see :func:`rcc_baseline`.
    Returns:
        (B,).
    """
    if recipe.objective == "contrastive":
        if delta is None:
            raise ValueError(
                f"recipe {recipe.name!r} has no advantages; it uses a reward threshold"
            )
        return rcc_baseline(rewards, delta, group_size, coef=rcc_coef, bound=rcc_bound)
    if delta is None:
        return group_advantages(rewards, group_size, scale_by_std=recipe.scale_by_std, eps=eps)
    return rcc_advantages(
        rewards,
        delta,
        group_size,
        coef=rcc_coef,
        bound=rcc_bound,
        scale_by_std=recipe.scale_by_std,
        eps=eps,
    )


for _recipe in (
    Recipe(
        "grpo",
        "policy",
        "grpo",
        True,
        0.04,
        "DeepSeekMath, arXiv:2402.03300",
        "clipped token ratio (0.2, 0.2), std-scaled group advantage, seq-mean-token-mean",
        label="GRPO",
        trl_loss_type="grpo",
    ),
    Recipe(
        "dr_grpo",
        "policy",
        "dr_grpo",
        False,
        0.01,
        "Dr.GRPO, arXiv:2503.20783",
        "GRPO without std scaling and with token sums over a constant length",
        label="Dr.GRPO",
        trl_loss_type="dr_grpo",
    ),
    Recipe(
        "dapo",
        "policy",
        "dapo",
        True,
        0.0,
        "DAPO, arXiv:2503.14476",
        "clip-higher (0.2, 0.28), token-mean, dynamic sampling, soft overlong punishment",
        dynamic_sampling=True,
        overlong_punishment=True,
        label="DAPO",
        trl_loss_type="dapo",
    ),
    Recipe(
        "gmpo",
        "policy",
        "gmpo",
        True,
        0.0,
        "GMPO, arXiv:2507.20673",
        "geometric mean of token ratios clipped in log space (e^+-0.4)",
        label="GMPO",
    ),
    Recipe(
        "gspo",
        "policy",
        "gspo",
        True,
        0.0,
        "GSPO, arXiv:2507.18071",
        "one length-normalised sequence ratio per completion, clip (3e-4, 4e-4)",
        label="GSPO",
        trl_loss_type="grpo",
        trl_importance_sampling_level="sequence",
    ),
    Recipe(
        "conspo",
        "contrastive",
        None,
        True,
        0.0,
        "ConSPO, arXiv:2605.12969",
        "InfoNCE of correct vs wrong length-normalised log-probs, cosine margin curriculum",
        label="ConSPO",
        # No ratio in its loss: the mode only decides which old log-probs exist.
        bicc_ratio_mode="consistent",
    ),
):
    register_recipe(_recipe)
