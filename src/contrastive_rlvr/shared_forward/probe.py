"""Proof that the packed forward is exact for a model, before the run relies on it.

:func:`~.packed_prefix.supports_packed_prefix` checks what can be read off a model (its
attention implementation, its layers, its signature); it cannot see how the model turns
positions into embeddings. Three families break the packed forward's premise that "each
token keeps its position in its row, and only relative positions matter":

- learned absolute positions (GPT-2): TRL's per-row forward gives left-padded tokens the
  padded column as position, the packed forward the count of real tokens;
- positions taken from the attention mask (OPT): the 4-D packed mask is not a padding mask;
- LongRoPE (Phi-3, Phi-4-mini): the rotary scaling factor switches from the short to the
  long table when the forward's largest position crosses
  ``original_max_position_embeddings``; the per-row forward reaches it with padding, the
  packed one with real tokens only.

So the choice is made by proof: :func:`probe_packed_forward` runs both forwards on a small
synthetic batch at the longest length the run can reach (and past any rope-scaling
threshold) and accepts the packed form only when the log-probs agree within a float32
tolerance.

The decision is taken in float32 whatever the run computes in. In bfloat16 the exact
packed and per-row forwards of SmolLM2-135M differ by a mean of 5.9e-2 nats (48 tokens;
3.5e-6 in float32), so a bfloat16 tolerance wide enough to accept an exact form also
accepts a wrong one. A model whose weights are float32 (bfloat16 by autocast) is probed
with autocast off; a model whose weights are in a lower precision is probed on a float32
copy of its first :data:`PROBE_LAYERS` decoder layers (with its embeddings, final norm
and head): a position or mask defect shows in the first layer already, and every layer
attends the same way. Where no copy can be made (weights sharded by FSDP / ZeRO-3,
quantized), the probe runs in the run's dtype with that dtype's tolerance, and says so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from .layout import _unwrap
from .packed_kernels import VARLEN_ATTENTION, enable_kernel_form, kernel_form
from .packed_kernels import varlen_attention_reference as _varlen_reference
from .packed_prefix import (
    IGNORE_INDEX,
    PackedPrefixUnsupported,
    packed_prefix_forward,
)

# Largest mean |packed - per-row| log-prob (nats over scored tokens) accepted, by the dtype the
# probe computes in (float32 unless the weights are sharded). A position bug costs tenths of
# a nat to nats (GPT-2 3.79, LongRoPE 0.85 measured on left-padded prompts); summation order
# alone costs ~1e-6 in float32, and in bfloat16 ~1e-2 on random weights, 5e-2 on SmolLM2.
PROBE_TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}
PROBE_LAYERS = 2  # decoder layers of the float32 copy of a low-precision model
PROBE_ROWS_PER_PROMPT = 2  # rows sharing each of the two synthetic prompts
PROBE_TOKEN_OFFSET = 4  # synthetic ids avoid the first ids (often pad / bos / eos)


def rope_threshold(model: torch.nn.Module) -> int | None:
    """The length past which the model's rotary scaling changes (LongRoPE's
    ``original_max_position_embeddings``), or None where its positions have no threshold."""
    config = _unwrap(model).config.get_text_config()
    scaling = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None)
    if not isinstance(scaling, dict):
        return None
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind not in ("longrope", "dynamic"):
        return None
    threshold = scaling.get("original_max_position_embeddings") or getattr(
        config, "original_max_position_embeddings", None
    )
    return int(threshold) if threshold else None


def probe_width(model: torch.nn.Module, width: int) -> int:
    """The probe's padded length for a batch of ``width`` tokens (prompt + completion): the
    batch's, raised past the rope-scaling threshold where the model has one and can reach
    it, capped at ``max_position_embeddings``."""
    config = _unwrap(model).config.get_text_config()
    limit = getattr(config, "max_position_embeddings", None)
    threshold = rope_threshold(model)
    if threshold is not None and (limit is None or threshold + 2 <= limit):
        width = max(width, threshold + 2)
    return min(width, limit) if limit else width


def synthetic_batch(
    width: int,
    completion_len: int,
    vocab_size: int,
    *,
    threshold: int | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(prompt_ids, prompt_mask, completion_ids, completion_mask) of 2 prompts x 2 rows,
    ``width`` tokens in all per row: the longer prompt unpadded (or, with a ``threshold``
    below ``width``, left-padded so that its rows' real length stays at the threshold while
    the padded width passes it), the shorter one left-padded, one completion of each prompt
    cut short, as TRL pads a generation batch.

    Shapes: (4, width - completion_len) and (4, completion_len)."""
    prompt_len = width - completion_len
    if prompt_len < 2 or completion_len < 1:
        raise ValueError(f"probe batch: width {width} leaves no prompt of 2 tokens")
    # The longer prompt fills its rows (the longest rows reach ``width`` real tokens: a
    # window or a position limit just below the width shows); the shorter one is left-padded,
    # which makes the per-row and packed positions differ where they can.
    pad = 0
    if threshold is not None and width > threshold:
        pad = width - threshold
    long_real = max(2, prompt_len - pad)
    short_real = max(1, prompt_len // 2)
    gen = torch.Generator().manual_seed(0)
    high = max(vocab_size, PROBE_TOKEN_OFFSET + 2)
    rows = []
    for real in (long_real, short_real):
        ids = torch.randint(PROBE_TOKEN_OFFSET, high, (real,), generator=gen)
        for _ in range(PROBE_ROWS_PER_PROMPT):
            rows.append(torch.cat([torch.zeros(prompt_len - real, dtype=torch.long), ids]))
    prompt_ids = torch.stack(rows)
    real_len = torch.tensor([long_real, short_real]).repeat_interleave(PROBE_ROWS_PER_PROMPT)
    prompt_mask = (torch.arange(prompt_len) >= (prompt_len - real_len).unsqueeze(1)).long()
    completion_ids = torch.randint(
        PROBE_TOKEN_OFFSET, high, (len(rows), completion_len), generator=gen
    )
    completion_mask = torch.ones_like(completion_ids)
    completion_mask[1, max(1, completion_len // 2) :] = 0  # a short completion per prompt
    completion_mask[3, max(1, completion_len // 3) :] = 0
    tensors = (prompt_ids, prompt_mask, completion_ids, completion_mask)
    return tuple(t.to(device) for t in tensors)  # type: ignore[return-value]


def per_row_logps(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> torch.Tensor:
    """(B, C) log-probs of the completions by TRL's per-row forward (the call
    ``GRPOTrainer._get_per_token_logps_and_entropies`` makes), 0 where the mask is 0."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    width = completion_ids.size(1)
    labels = ids.masked_fill(mask == 0, IGNORE_INDEX)
    labels[:, :-width] = IGNORE_INDEX
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -width:] * completion_mask


def _compute_dtype(model: torch.nn.Module, device: torch.device) -> torch.dtype:
    """The lowest precision the forward runs in: the weights', or autocast's when on."""
    dtype = next(_unwrap(model).parameters()).dtype
    if torch.is_autocast_enabled(device.type):
        low = torch.get_autocast_dtype(device.type)
        if torch.finfo(low).eps > torch.finfo(dtype).eps:
            dtype = low
    return dtype


def _sharded(inner: torch.nn.Module) -> bool:
    """Whether the weights are sharded across processes (FSDP2's DTensors, ZeRO-3's
    partitioned parameters, FSDP1's flattened ones): no local copy can be made."""
    return any(
        type(p).__name__ == "DTensor" or hasattr(p, "ds_id") or p.numel() == 0
        for p in inner.parameters()
    )


def _decoder_layers(inner: torch.nn.Module) -> tuple[torch.nn.Module, str] | None:
    """(owner, attribute) of the ModuleList holding the ``num_hidden_layers`` decoder layers."""
    count = getattr(inner.config.get_text_config(), "num_hidden_layers", None)
    for owner in inner.modules():
        for name, child in owner.named_children():
            if isinstance(child, torch.nn.ModuleList) and len(child) == count:
                return owner, name
    return None


def float32_copy(model: torch.nn.Module, layers: int = PROBE_LAYERS) -> torch.nn.Module | None:
    """A float32 copy of the model (unwrapped) with its first ``layers`` decoder layers only,
    in eval mode without gradients, on the model's device, with the same attention form
    (flash varlen runs its pure-torch stand-in there: flash kernels take no float32). None
    when the weights are sharded or the decoder layers cannot be found. TRL's fused head
    carries over: its patched ``forward`` looks the backbone up on the copy. None too where
    the copy cannot be made or upcast (quantized weights)."""
    inner = _unwrap(model)
    found = _decoder_layers(inner)
    if found is None or _sharded(inner):
        return None
    owner, name = found
    full = owner._modules[name]
    owner._modules[name] = torch.nn.ModuleList(list(full)[:layers])
    try:
        clone = copy.deepcopy(inner)  # the layers left out are not copied
        clone.float().eval().requires_grad_(False)
    except Exception:
        return None
    finally:
        owner._modules[name] = full
    text = clone.config.get_text_config()
    kept = min(layers, len(full))
    text.num_hidden_layers = kept
    if getattr(text, "layer_types", None) is not None:
        text.layer_types = list(text.layer_types)[:kept]
    impl = clone.config._attn_implementation or ""
    if kernel_form(impl) == VARLEN_ATTENTION and "flash" in impl.split(":", 1)[1]:
        clone.config._attn_implementation = "sdpa"
        enable_kernel_form(clone, form=VARLEN_ATTENTION, kernel=_varlen_reference)
    return clone


def probe_packed_forward(
    model: torch.nn.Module,
    width: int,
    completion_len: int,
    *,
    packed: Callable[..., torch.Tensor] | None = None,
    autocast: Callable[[], Any] = nullcontext,
) -> tuple[bool, str]:
    """Whether the packed forward gives the per-row log-probs on ``model`` at this length.

    Runs, without gradient and with dropout off, the packed form (``packed``: a callable
    ``(model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> (B, C)``,
    by default :func:`~.packed_prefix.packed_prefix_forward`) and TRL's per-row forward on
    :func:`synthetic_batch` at :func:`probe_width` tokens, and compares the mean absolute
    difference over scored tokens with :data:`PROBE_TOLERANCE` of the dtype the probe
    computes in: float32 (autocast off; a float32 copy of the first layers for weights in a
    lower precision, :func:`float32_copy`), else, with sharded weights, the run's (under
    ``autocast``). A packed form that refuses an attention argument it does not implement
    (:class:`~.packed_prefix.PackedPrefixUnsupported`) fails the probe.

    Returns ``(True, summary)`` or ``(False, reason)``, both naming the measured difference
    or the refusal, the dtype and what the probe ran on.
    """
    inner = _unwrap(model)
    device = next(inner.parameters()).device
    width = probe_width(model, width)
    completion_len = max(1, min(completion_len, width - 2))
    vocab = inner.config.get_text_config().vocab_size
    tensors = synthetic_batch(
        width, completion_len, vocab, threshold=rope_threshold(model), device=device
    )
    if packed is None:

        def packed(m: torch.nn.Module, *t: torch.Tensor) -> torch.Tensor:
            return packed_prefix_forward(m, *t)[0]

    with autocast():
        run_dtype = _compute_dtype(model, device)
    target, context, where = model, torch.autocast(device.type, enabled=False), "the model"
    if next(inner.parameters()).dtype != torch.float32:
        target = float32_copy(model)
        where = f"a float32 copy of its first {PROBE_LAYERS} layers"
        if target is None:  # sharded: decide in the run's dtype
            target, context, where = model, autocast(), "the model (sharded: run dtype)"
    was_training = inner.training
    inner.eval()
    try:
        with torch.no_grad(), context:
            dtype = _compute_dtype(target, device)
            # The packed form first: a refused argument ends the probe before the per-row
            # forward (which, on the float32 copy's stand-in attention, may not take it).
            shared = packed(target, *tensors).float()
            reference = per_row_logps(target, *tensors).float()
    except PackedPrefixUnsupported as err:
        return False, f"the packed forward refuses this model: {err}"
    finally:
        inner.train(was_training)
    scored = tensors[3].bool()
    diff = (shared - reference).abs()[scored]
    mean, worst = float(diff.mean()), float(diff.max())
    tolerance = PROBE_TOLERANCE.get(dtype, PROBE_TOLERANCE[torch.float16])
    name = str(dtype).removeprefix("torch.")
    summary = (
        f"packed vs per-row log-probs at {width} tokens: mean |diff| {mean:.2e}, "
        f"max {worst:.2e} nats (tolerance {tolerance:.0e} in {name}, on {where}; the run "
        f"computes in {str(run_dtype).removeprefix('torch.')})"
    )
    if not mean <= tolerance:  # NaN fails too
        return False, summary
    return True, summary
