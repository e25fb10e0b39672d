"""Log-probs of completions whose prompts repeat, in ONE forward with each prompt packed once.

Under BiCC every row of one partition of a group has the same conditioned
prompt ``[q ; O_opposite]`` (and under plain GRPO every row of a group has the
same prompt ``q``). This module packs each distinct prompt once, followed by
the completions of all the rows that share it, into one sequence, and runs one
ordinary forward through the model with a 4-D attention mask that lets every
completion see the shared prompt and itself only (causal within itself). Each
token keeps the position it has in its own row's sequence, so the log-probs
equal those of one forward per row (the tests check values and gradients to
1e-5 in float32). This is the layout of Prefix Grouper (arXiv:2506.05433),
written as a dense mask for PyTorch's SDPA rather than as split attention.

Because it is one forward per backward through the model's own ``forward``, it
works wherever the per-row forward does: under gradient checkpointing, DDP,
DeepSpeed ZeRO and FSDP (the wrapper's hooks see one ordinary call). The
two-pass key/value-cache form (:mod:`.prefix`) does not.

Layout of one packed row, for a prompt of real tokens ``p_0 .. p_{P-1}`` shared
by rows ``r_1 .. r_k`` with completions ``c^r``::

    p_0 .. p_{P-2} | p_{P-1} c^1_0 .. c^1_{n1-2} | p_{P-1} c^2_0 .. | ... | pad
    positions 0..P-2 | P-1, P, ..., P+n1-2      | P-1, P, ...       |

The last prompt token is repeated at the head of every segment because its
output predicts each row's first completion token, a different label per row.
The last completion token is left out: it predicts nothing. Left padding of the
prompts is dropped (positions count real tokens, as generation does; rotary
embeddings depend only on relative positions, so this equals the left-padded
per-row forward). Log-probs are taken by TRL's fused LM head through
``shift_labels``: on CUDA/XPU it projects only the labelled (completion)
positions, never a full-vocabulary tensor; on CPU TRL scores every position in
tiles and masks the rest, as it does for the per-row forward.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from .prefix import distinct_rows

# Attention implementations whose kernels take an arbitrary 4-D mask, and the mask form each
# one wants: SDPA a boolean (True = attend), eager an additive float mask.
MASK_KINDS = {"sdpa": "bool", "eager": "additive"}
IGNORE_INDEX = -100  # TRL's fused head skips labels equal to this


class PackedPrefixUnsupported(RuntimeError):
    """The model's attention cannot take the packed layout's mask; use the per-row forward."""


@dataclass
class PackedLayout:
    """The packed inputs of a batch and how to read the per-row log-probs back.

    Attributes:
        input_ids: (U, L) one packed row per distinct prompt.
        position_ids: (U, L) each token's position in its own row's sequence.
        allowed: (U, L, L) bool, ``allowed[u, q, k]``: query q may attend key k.
        shift_labels: (U, L) the token each position predicts, -100 where nothing is scored.
        index: (B, C) flat index into (U * L) of the position that predicts
            completion token j of row b (0 where ``valid`` is False).
        valid: (B, C) bool, the completion positions that were packed.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    allowed: torch.Tensor
    shift_labels: torch.Tensor
    index: torch.Tensor
    valid: torch.Tensor

    @property
    def tokens(self) -> int:
        """Packed length U * L (with the tail padding of the shorter packed rows)."""
        return self.input_ids.numel()


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model under DDP / accelerate / DeepSpeed wrappers (they expose ``.module``)."""
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    return model


def supports_packed_prefix(model: torch.nn.Module) -> tuple[bool, str]:
    """Whether :func:`packed_prefix_logps` is exact for ``model``, and why not if not.

    Checked: a decoder-only text model patched with TRL's fused LM head, whose
    attention implementation takes an arbitrary 4-D mask (``sdpa``, ``eager``;
    not flash attention, whose kernels take only causal/varlen masks), with
    full attention in every layer (a sliding-window or chunked layer would
    get the dense mask instead of its own), and whose backbone accepts
    ``position_ids``.
    """
    inner = _unwrap(model)
    config = getattr(inner, "config", None)
    if config is None:
        return False, f"{type(inner).__name__} has no config"
    if getattr(config, "is_encoder_decoder", False):
        return False, "encoder-decoder model"
    if config.get_text_config() is not config:
        return False, f"{config.model_type} is multimodal (its positions are not 1-D)"
    impl = getattr(config, "_attn_implementation", None)
    if impl not in MASK_KINDS:
        return False, (
            f"attn_implementation={impl!r} cannot take a custom 4-D mask "
            f"(supported: {sorted(MASK_KINDS)})"
        )
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        other = sorted({t for t in layer_types if t != "full_attention"})
        if other:
            return False, f"layers of type {other} would ignore their own masks"
    elif getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return False, f"sliding_window={config.sliding_window} would be ignored by a 4-D mask"
    if "fused_lm_head" not in inspect.signature(inner.forward, follow_wrapped=False).parameters:
        return False, "the model is not patched with TRL's add_fused_lm_head"
    backbone = getattr(inner, "base_model", None)
    if backbone is None or "position_ids" not in inspect.signature(backbone.forward).parameters:
        return False, "the backbone's forward takes no position_ids"
    return True, ""


def build_packed_layout(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> PackedLayout:
    """Pack each distinct prompt once with the completions of its rows.

    Args:
        prompt_ids: (B, P) left-padded prompts.
        prompt_mask: (B, P) 1 on real prompt tokens.
        completion_ids: (B, C) right-padded completions.
        completion_mask: (B, C) 1 on scored tokens. A 0 inside a completion is a
            key nobody attends to, as in the per-row forward.
    Returns:
        :class:`PackedLayout` on the inputs' device.
    """
    device = prompt_ids.device
    first, inverse = distinct_rows(prompt_ids, prompt_mask)
    order = torch.argsort(first)  # packed rows in order of each prompt's first row
    first, inverse = first[order], torch.argsort(order)[inverse]
    prompt_len = prompt_mask.sum(1)
    if int(prompt_len.min()) < 1:
        raise ValueError("packed_prefix_logps: a row has an empty prompt (no 1 in prompt_mask)")
    batch, width = completion_ids.shape
    columns = torch.arange(width, device=device)
    # Tokens kept per row: up to the last scored one (at least one, so every row has a segment).
    kept = (torch.where(completion_mask.bool(), columns, -1).amax(1) + 1).clamp(min=1)

    prompts, masks = prompt_ids.tolist(), prompt_mask.tolist()
    comps, comp_masks = completion_ids.tolist(), completion_mask.tolist()
    kept_list, inverse_list = kept.tolist(), inverse.tolist()
    packed: list[dict[str, list[int]]] = []
    starts = [0] * batch  # where row b's segment starts in its packed row
    for u, row in enumerate(first.tolist()):
        real = [t for t, m in zip(prompts[row], masks[row], strict=True) if m]
        n_shared = len(real) - 1
        seq = {
            "ids": real[:-1],
            "pos": list(range(n_shared)),
            "seg": [-1] * n_shared,
            "key": [1] * n_shared,
            "label": [IGNORE_INDEX] * n_shared,
        }
        for b in (b for b in range(batch) if inverse_list[b] == u):
            n = kept_list[b]
            starts[b] = len(seq["ids"])
            seq["ids"] += [real[-1]] + comps[b][: n - 1]
            seq["pos"] += list(range(n_shared, n_shared + n))
            seq["seg"] += [b] * n
            seq["key"] += [1] + comp_masks[b][: n - 1]
            seq["label"] += [
                c if m else IGNORE_INDEX
                for c, m in zip(comps[b][:n], comp_masks[b][:n], strict=True)
            ]
        packed.append(seq)

    length = max(len(s["ids"]) for s in packed)

    def stack(key: str, fill: int) -> torch.Tensor:
        rows = [s[key] + [fill] * (length - len(s[key])) for s in packed]
        return torch.tensor(rows, dtype=torch.long, device=device)

    seg, key_ok = stack("seg", -2), stack("key", 0).bool()
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    same = (seg.unsqueeze(2) == seg.unsqueeze(1)) | (seg == -1).unsqueeze(1)  # (U, Lq, Lk)
    is_pad = (seg == -2).unsqueeze(2)  # (U, Lq, 1)
    allowed = same & causal & key_ok.unsqueeze(1) & ~is_pad
    # Tail padding attends to itself only, so no query row is empty (an empty row is NaN in SDPA).
    allowed = allowed | (is_pad & torch.eye(length, dtype=torch.bool, device=device))

    offsets = torch.tensor(starts, device=device) + inverse * length  # (B,)
    valid = columns.unsqueeze(0) < kept.unsqueeze(1)  # (B, C)
    index = torch.where(valid, offsets.unsqueeze(1) + columns, 0)
    return PackedLayout(
        input_ids=stack("ids", 0),
        position_ids=stack("pos", 0),
        allowed=allowed,
        shift_labels=stack("label", IGNORE_INDEX),
        index=index,
        valid=valid,
    )


def attention_mask_for(model: torch.nn.Module, allowed: torch.Tensor) -> torch.Tensor:
    """The (U, 1, L, L) 4-D mask in the form the model's attention implementation takes."""
    inner = _unwrap(model)
    kind = MASK_KINDS[inner.config._attn_implementation]
    mask = allowed.unsqueeze(1)
    if kind == "bool":
        return mask
    dtype = inner.dtype if inner.dtype.is_floating_point else torch.float32
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(mask, zero, torch.finfo(dtype).min)


def packed_prefix_logps(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    layout: PackedLayout | None = None,
) -> torch.Tensor:
    """Per-token log-probs (B, C) of each completion after its prompt, in one forward.

    ``model`` is a causal LM (possibly wrapped by DDP / DeepSpeed / FSDP) patched with TRL's
    fused LM head (``add_fused_lm_head``: temperature applied there). Prompts are
    left-padded (B, P), completions right-padded (B, C); rows with identical
    (prompt_ids, prompt_mask) share one packed prompt. Positions where
    ``completion_mask`` is 0 get 0, as in TRL's per-row forward.

    Raises:
        PackedPrefixUnsupported: the model cannot take the mask (see
            :func:`supports_packed_prefix`); the caller falls back to the per-row forward.
    """
    ok, reason = supports_packed_prefix(model)
    if not ok:
        raise PackedPrefixUnsupported(reason)
    if layout is None:
        layout = build_packed_layout(prompt_ids, prompt_mask, completion_ids, completion_mask)
    out = model(
        input_ids=layout.input_ids,
        attention_mask=attention_mask_for(model, layout.allowed),
        position_ids=layout.position_ids,
        shift_labels=layout.shift_labels,
        fused_lm_head=True,
    )
    flat = out.log_probs.reshape(-1)  # (U * L,)
    return torch.where(layout.valid, flat[layout.index], 0.0)  # (B, C)
