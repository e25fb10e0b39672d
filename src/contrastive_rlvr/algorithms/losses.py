"""Policy losses of the GRPO family, one function per paper, behind one registry.

Every loss has one signature, ``(logp, old_logp, advantages, mask, options)``, as
every verl policy loss has one: ``options`` is a frozen :class:`ClipOptions` (or a
subclass holding the loss's own extras), whose defaults are stated once, there; a
loss's paper values are its registration's. It returns ``(loss, metrics)`` with
``loss`` the scalar to *minimise* and ``metrics`` a dict of detached 0-dim tensors:

- ``loss/policy``: the policy term alone (without KL);
- ``clip/frac``, ``clip/low_frac``, ``clip/high_frac``: share of terms (tokens,
  or rows for the sequence-level GSPO) where clipping zeroes the gradient:
  ratio below ``1 - clip_low`` with A < 0, above ``1 + clip_high`` with A > 0;
- ``ratio/mean``: mean importance ratio over completion tokens (rows for GSPO);
- ``kl/mean``: mean k3 estimate of KL(pi_theta || pi_ref) per token, when
  ``ref_logp`` is given.

Shapes: ``logp``, ``old_logp``, ``ref_logp``, ``mask`` are (B, T); advantages
are per row (B,) or, for the token-level losses, per token (B, T).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import torch

from .aggregation import AggMode, agg_loss
from .ops import Tensor, check_same_shape, masked_fill_zero, masked_mean, per_token

# Log-ratios are clamped before exp(): exp(20) ~ 4.9e8 is far past any clip
# bound, and the clamp keeps a stray logit from producing inf * 0 = NaN.
LOG_RATIO_LIMIT = 20.0

LossFn = Callable[..., tuple[Tensor, dict[str, Tensor]]]


@dataclass(frozen=True, kw_only=True)
class ClipOptions:
    """The options of a clipped policy loss, each default stated here once (GRPO's).

    Attributes:
        clip_low, clip_high: the ratio's clip range ``[1 - clip_low, 1 + clip_high]``.
        ref_logp: (B, T) reference log-probs, for the k3 KL term and ``kl/mean``.
        beta: the KL term's weight (> 0 needs ``ref_logp``).
        num_rows: the rows of the whole batch the loss is divided by (default B).
    """

    #: The options whose default is a paper's value (a registration may override them).
    PAPER: typing.ClassVar[tuple[str, ...]] = ("clip_low", "clip_high")
    clip_low: float = 0.2
    clip_high: float = 0.2
    ref_logp: Tensor | None = None
    beta: float = 0.0
    num_rows: float | Tensor | None = None

    def agg_kwargs(self) -> dict[str, object]:
        """:func:`agg_loss`'s arguments for the KL term (the sequence losses' mean)."""
        return dict(mode="seq-mean-token-mean", num_rows=self.num_rows)


@dataclass(frozen=True, kw_only=True)
class TokenClipOptions(ClipOptions):
    """:class:`ClipOptions` of a token-level loss, with its aggregation (:func:`agg_loss`):
    ``agg`` the mode, ``max_len`` Dr.GRPO's constant (default T), ``num_tokens`` the
    completion tokens of the whole batch (default ``mask.sum()``)."""

    PAPER: typing.ClassVar[tuple[str, ...]] = ("clip_low", "clip_high", "agg")
    agg: AggMode = "seq-mean-token-mean"
    max_len: int | None = None
    num_tokens: float | Tensor | None = None

    def agg_kwargs(self) -> dict[str, object]:
        """:func:`agg_loss`'s arguments, for the policy term and the KL term alike."""
        return dict(
            mode=self.agg, max_len=self.max_len, num_rows=self.num_rows, num_tokens=self.num_tokens
        )


@dataclass(frozen=True)
class LossSpec:
    """A registered policy loss: its function, its options' class and the paper values
    that differ from that class's defaults."""

    name: str
    fn: LossFn
    options: type[ClipOptions] = ClipOptions
    overrides: dict[str, object] = field(default_factory=dict)
    per_row_advantages_only: bool = False
    paper: str = ""

    @property
    def defaults(self) -> dict[str, object]:
        """The paper defaults of the loss's options (clip bounds, aggregation, ...)."""
        return {k: getattr(self.options, k) for k in self.options.PAPER} | self.overrides


POLICY_LOSSES: dict[str, LossSpec] = {}


def register_policy_loss(
    name: str, *, per_row_advantages_only: bool = False, paper: str = "", **defaults: object
) -> Callable[[LossFn], LossFn]:
    """Decorator adding a loss to :data:`POLICY_LOSSES`; a duplicate name raises.

    ``fn(logp, old_logp, advantages, mask, options)``, ``options`` annotated with its
    :class:`ClipOptions` class; ``defaults``: the paper values that differ from it."""

    def wrap(fn: LossFn) -> LossFn:
        if name in POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is already registered")
        options = typing.get_type_hints(fn).get("options")
        if not (isinstance(options, type) and issubclass(options, ClipOptions)):
            raise ValueError(
                f"policy loss {name!r} must be fn(logp, old_logp, advantages, mask, options) "
                "with options annotated as a ClipOptions class"
            )
        unknown = set(defaults) - {f.name for f in fields(options)}
        if unknown:
            raise ValueError(f"policy loss {name!r}: {options.__name__} has no {sorted(unknown)}")
        spec = LossSpec(name, fn, options, dict(defaults), per_row_advantages_only, paper)
        POLICY_LOSSES[name] = spec
        return fn

    return wrap


def get_policy_loss(name: str) -> LossSpec:
    """The registered loss ``name``; an unknown name raises listing the valid ones."""
    try:
        return POLICY_LOSSES[name]
    except KeyError:
        valid = ", ".join(sorted(POLICY_LOSSES))
        raise ValueError(f"unknown policy loss {name!r}; valid: {valid}") from None


def loss_option_names(name: str) -> set[str]:
    """The keyword options the registered loss ``name`` accepts."""
    return {f.name for f in fields(get_policy_loss(name).options)}


def policy_loss(
    name: str, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, **options: object
) -> tuple[Tensor, dict[str, Tensor]]:
    """Compute the registered policy loss ``name``.

    Options not given take the loss's paper defaults (see the README's recipe
    table); an option the loss does not take raises ``ValueError``.

    Args:
        name: ``grpo``, ``dapo``, ``dr_grpo``, ``gspo``, ``gspo_token``, ``gmpo``
            or any name registered with :func:`register_policy_loss`.
        logp: (B, T) log-probs of the completion tokens under the policy being trained.
        old_logp: (B, T) log-probs under the sampling policy (no gradient).
        advantages: (B,) or (B, T).
        mask: (B, T), 1 on completion tokens.
        **options: the fields of the loss's options class (:class:`ClipOptions`,
            :class:`TokenClipOptions`, or the loss's own subclass).
    Returns:
        ``(loss, metrics)``.
    """
    spec = get_policy_loss(name)
    check_same_shape(logp=logp, old_logp=old_logp, mask=mask)
    if logp.dim() != 2:
        raise ValueError(f"logp must be (B, T), got shape {list(logp.shape)}")
    if spec.per_row_advantages_only and advantages.dim() != 1:
        raise ValueError(
            f"policy loss {name!r} is sequence-level and needs per-row advantages (B,), "
            f"got shape {list(advantages.shape)}"
        )
    accepted = loss_option_names(name)
    unknown = set(options) - accepted
    if unknown:
        raise ValueError(
            f"policy loss {name!r} takes no option(s) {sorted(unknown)}; valid: {sorted(accepted)}"
        )
    if not spec.per_row_advantages_only:
        advantages = per_token(advantages, mask)
    chosen = spec.options(**{**spec.defaults, **options})  # type: ignore[arg-type]
    return spec.fn(logp, old_logp, advantages, mask, chosen)


# ----------------------------------------------------------------------------- helpers


def log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """``logp - old_logp`` (B, T), 0 on padding, clamped to +-:data:`LOG_RATIO_LIMIT`."""
    return masked_fill_zero(logp - old_logp, mask).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)


def k3_kl(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref), (B, T), 0 on padding.

    ``exp(l_ref - l_theta) - (l_ref - l_theta) - 1`` (Schulman's k3; GRPO paper Eq. 4).
    """
    d = log_ratio(ref_logp, logp, mask)
    return masked_fill_zero(torch.exp(d) - d - 1, mask)


def _clip_flags(
    ratio: Tensor, adv: Tensor, clip_low: float, clip_high: float
) -> tuple[Tensor, Tensor]:
    """Where the clipped surrogate has zero gradient: below the low bound with A < 0,
    above the high bound with A > 0."""
    return (ratio < 1 - clip_low) & (adv < 0), (ratio > 1 + clip_high) & (adv > 0)


def _clipped_surrogate(ratio: Tensor, adv: Tensor, clip_low: float, clip_high: float) -> Tensor:
    """``-min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)`` elementwise (PPO, Eq. 7)."""
    if clip_low < 0 or clip_high < 0:
        raise ValueError(
            f"clip bounds must be >= 0, got clip_low={clip_low}, clip_high={clip_high}"
        )
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high)
    return -torch.minimum(ratio * adv, clipped * adv)


def _add_kl(
    loss: Tensor,
    metrics: dict[str, Tensor],
    logp: Tensor,
    mask: Tensor,
    options: ClipOptions,
    row_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Add ``beta * k3`` aggregated like the policy term (each row's k3 times its (B, 1)
    ``row_weights`` when given); report ``kl/mean``."""
    metrics["loss/policy"] = loss.detach()
    ref_logp, beta = options.ref_logp, options.beta
    if ref_logp is None:
        if beta > 0:
            raise ValueError(f"beta={beta} > 0 needs ref_logp (the reference log-probs)")
        return loss, metrics
    check_same_shape(logp=logp, ref_logp=ref_logp)
    kl = k3_kl(logp, ref_logp, mask)
    metrics["kl/mean"] = masked_mean(kl, mask).detach()
    if beta > 0:
        weighted = kl if row_weights is None else row_weights * kl
        loss = loss + beta * agg_loss(weighted, mask, **options.agg_kwargs())  # type: ignore[arg-type]
    return loss, metrics


def _token_clip_metrics(ratio: Tensor, adv: Tensor, mask: Tensor, low: float, high: float) -> dict:
    lo, hi = _clip_flags(ratio, adv, low, high)
    lo_frac, hi_frac = masked_mean(lo.float(), mask), masked_mean(hi.float(), mask)
    return {
        "clip/low_frac": lo_frac.detach(),
        "clip/high_frac": hi_frac.detach(),
        "clip/frac": (lo_frac + hi_frac).detach(),
        "ratio/mean": masked_mean(ratio, mask).detach(),
    }


def _token_level_clipped(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, options: TokenClipOptions
) -> tuple[Tensor, dict[str, Tensor]]:
    """The clipped token-ratio surrogate shared by GRPO, DAPO and Dr.GRPO."""
    low, high = options.clip_low, options.clip_high
    ratio = torch.exp(log_ratio(logp, old_logp, mask))
    per_tok = _clipped_surrogate(ratio, advantages, low, high)
    loss = agg_loss(per_tok, mask, **options.agg_kwargs())  # type: ignore[arg-type]
    metrics = _token_clip_metrics(ratio, advantages, mask, low, high)
    return _add_kl(loss, metrics, logp, mask, options)


# ----------------------------------------------------------------------------- losses


@register_policy_loss("grpo", paper="arXiv:2402.03300 Eq. 3")
def grpo_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, options: TokenClipOptions
) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO (DeepSeekMath, arXiv:2402.03300, Eq. 3).

    ``-(1/B) sum_i (1/|o_i|) sum_t min(rho_t A, clip(rho_t, 1-0.2, 1+0.2) A) + beta k3``,
    ``rho_t = exp(logp - old_logp)``.
    """
    return _token_level_clipped(logp, old_logp, advantages, mask, options)


@register_policy_loss("dapo", clip_high=0.28, agg="token-mean", paper="arXiv:2503.14476 Eq. 8")
def dapo_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, options: TokenClipOptions
) -> tuple[Tensor, dict[str, Tensor]]:
    """DAPO (arXiv:2503.14476, Eq. 8): clip-higher (0.2, 0.28) and one token-mean
    over all completion tokens of the batch. Dynamic sampling and the soft
    overlong punishment act on the batch and reward, not here
    (see :mod:`contrastive_rlvr.algorithms.dapo`)."""
    return _token_level_clipped(logp, old_logp, advantages, mask, options)


@register_policy_loss("dr_grpo", agg="seq-mean-token-sum-norm", paper="arXiv:2503.20783 Eq. 4")
def dr_grpo_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, options: TokenClipOptions
) -> tuple[Tensor, dict[str, Tensor]]:
    """Dr.GRPO (arXiv:2503.20783, Eq. 4): each row's token sum divided by the
    constant ``max_len`` (default the mask width T), then mean over rows; no
    length bias. Pair with ``group_advantages(scale_by_std=False)``."""
    return _token_level_clipped(logp, old_logp, advantages, mask, options)


def _sequence_log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """``mean_t (logp - old_logp)`` per row (B,): log of GSPO's sequence ratio."""
    return masked_mean(log_ratio(logp, old_logp, mask), mask, dim=1)


@register_policy_loss(
    "gspo",
    per_row_advantages_only=True,
    clip_low=3e-4,
    clip_high=4e-4,
    paper="arXiv:2507.18071 Eq. 5-7",
)
def gspo_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, options: ClipOptions
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO (arXiv:2507.18071, Eq. 5-7), sequence-level.

    ``s_i = exp(mean_t (logp - old_logp))``; loss
    ``-(1/B) sum_i min(s_i A_i, clip(s_i, 1-3e-4, 1+4e-4) A_i)``. Clip metrics
    count rows. Advantages must be per row (B,).
    """
    if advantages.shape != (logp.shape[0],):
        raise ValueError(f"advantages must be ({logp.shape[0]},), got {list(advantages.shape)}")
    low, high = options.clip_low, options.clip_high
    seq_ratio = torch.exp(_sequence_log_ratio(logp, old_logp, mask))  # (B,)
    per_row = _clipped_surrogate(seq_ratio, advantages, low, high)
    loss = per_row.sum() / (logp.shape[0] if options.num_rows is None else options.num_rows)
    lo, hi = _clip_flags(seq_ratio, advantages, low, high)
    metrics = {
        "clip/low_frac": lo.float().mean().detach(),
        "clip/high_frac": hi.float().mean().detach(),
        "clip/frac": (lo | hi).float().mean().detach(),
        "ratio/mean": seq_ratio.mean().detach(),
    }
    return _add_kl(loss, metrics, logp, mask, options)


@register_policy_loss(
    "gspo_token", clip_low=3e-4, clip_high=4e-4, paper="arXiv:2507.18071 Eq. 13-14"
)
def gspo_token_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, options: ClipOptions
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO-token (arXiv:2507.18071, Eq. 13-14), for per-token advantages.

    ``log s_it = logp_t - sg(logp_t) + sg(log s_i)``: the value of every
    token's ratio is the sequence ratio ``s_i`` while its gradient is that of
    ``logp_t``. With a constant advantage per row it equals :func:`gspo_loss`
    in value and gradient. Aggregation: seq-mean-token-mean.
    """
    log_s = _sequence_log_ratio(logp, old_logp, mask).detach()  # (B,)
    safe_logp = masked_fill_zero(logp, mask)
    token_ratio = torch.exp(safe_logp - safe_logp.detach() + log_s.unsqueeze(1))  # (B, T)
    low, high = options.clip_low, options.clip_high
    per_tok = _clipped_surrogate(token_ratio, advantages, low, high)
    loss = agg_loss(per_tok, mask, **options.agg_kwargs())  # type: ignore[arg-type]
    metrics = _token_clip_metrics(token_ratio, advantages, mask, low, high)
    return _add_kl(loss, metrics, logp, mask, options)


@register_policy_loss(
    "gmpo",
    per_row_advantages_only=True,
    clip_low=0.4,
    clip_high=0.4,
    paper="arXiv:2507.20673 Eq. 4",
)
def gmpo_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, options: ClipOptions
) -> tuple[Tensor, dict[str, Tensor]]:
    """GMPO (arXiv:2507.20673): geometric mean of token ratios, clipped in log space.

    ``d_t = logp - old_logp``; ``d~_t = min(d_t, clip(d_t, -eps_l, eps_h))`` for
    A > 0 and ``max(...)`` for A < 0 (so only the direction that would enlarge
    the update is cut); ``w_i = exp(mean_t d~_t)``; loss ``-(1/B) sum_i A_i w_i``.
    Default eps 0.4 (ratio range e^+-0.4). Clip metrics count tokens.
    """
    if advantages.shape != (logp.shape[0],):
        raise ValueError(f"advantages must be ({logp.shape[0]},), got {list(advantages.shape)}")
    d = log_ratio(logp, old_logp, mask)  # (B, T)
    clipped = d.clamp(-options.clip_low, options.clip_high)
    positive = (advantages > 0).unsqueeze(1)
    d_tilde = torch.where(positive, torch.minimum(d, clipped), torch.maximum(d, clipped))
    weight = torch.exp(masked_mean(d_tilde, mask, dim=1))  # (B,)
    rows = logp.shape[0] if options.num_rows is None else options.num_rows
    loss = -(advantages * weight).sum() / rows
    adv_tok = advantages.unsqueeze(1).expand_as(d)
    # A row with A = 0 has no gradient whatever its ratio: nothing there is "clipped".
    cut = (d_tilde != d) & mask.bool() & (adv_tok != 0)
    metrics = {
        "clip/low_frac": masked_mean((cut & (adv_tok < 0)).float(), mask).detach(),
        "clip/high_frac": masked_mean((cut & (adv_tok > 0)).float(), mask).detach(),
        "clip/frac": masked_mean(cut.float(), mask).detach(),
        "ratio/mean": weight.mean().detach(),
    }
    return _add_kl(loss, metrics, logp, mask, options)
