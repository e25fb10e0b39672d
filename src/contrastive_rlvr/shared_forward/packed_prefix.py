"""Log-probs of completions whose prompts repeat, in ONE forward with each prompt packed once.

Under BiCC every row of one partition of a group has the same conditioned
prompt ``[q ; O_opposite]`` (and under plain GRPO every row of a group has the
same prompt ``q``). This module packs each distinct prompt once, followed by
the completions of all the rows that share it, into one sequence, and runs one
ordinary forward through the model in which every completion sees the shared
prompt and itself only (causal within itself). Each token keeps the position
it has in its own row's sequence, so the log-probs equal those of one forward
per row (the tests check values and gradients to 1e-5 in float32). This is the
layout of Prefix Grouper (arXiv:2506.05433). Two forms of its attention:

- split attention (:data:`SPLIT_ATTENTION`, switched on by
  :func:`enable_split_attention` for an SDPA model): the prompts' shared parts
  attend to themselves (one causal SDPA call), then each row's segment attends
  to [its prompt ; itself] (one masked SDPA call). Its cost is what the rows
  need; measured fastest (docs/performance.md).
- a dense 4-D mask over each packed row, for any ``sdpa`` or ``eager`` model
  without the switch: the mask is passed as the model's ``attention_mask``
  (transformers uses a 4-D mask as given). Its attention costs the square of
  the packed length.

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
import re

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .layout import PackedLayout, PackedPrefixUnsupported, SplitLayout, _unwrap
from .packed_kernels import (
    KERNEL_FORMS,
    VARLEN_ATTENTION,
    flex_block_mask,
    kernel_form,
    refuse_unimplemented,
    varlen_layout,
)
from .prefix import distinct_rows

# Attention implementations whose kernels take an arbitrary 4-D mask, and the mask form each
# one wants: SDPA a boolean (True = attend), eager an additive float mask.
MASK_KINDS = {"sdpa": "bool", "eager": "additive", "sdpa_split_prefix": "split"}
IGNORE_INDEX = -100  # TRL's fused head skips labels equal to this


# The attention implementation that runs the packed layout as split attention: SDPA on each
# prompt's shared part, then SDPA of each segment over [its prompt ; itself]. Every other call
# (no ``packed_prefix`` keyword: generation, the per-row forward) is transformers' own SDPA.
SPLIT_ATTENTION = "sdpa_split_prefix"


def split_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    packed_prefix: SplitLayout | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention of a packed batch in two SDPA calls (the split form of Prefix Grouper,
    arXiv:2506.05433): each prompt's shared part attends to itself causally, and each
    row's segment attends to [its prompt's shared keys ; its own earlier keys]. Exact, and
    its cost is what the rows need, not the square of the packed length.

    ``query`` (U, H, L, d), ``key``/``value`` (U, H_kv, L, d); returns (U, L, H, d) as
    transformers' attention functions do. Without ``packed_prefix`` this is SDPA.
    """
    if packed_prefix is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    refuse_unimplemented(module, "split", kwargs)  # softcap, a window, sinks: never dropped
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    dropout = dropout if module.training else 0.0
    split = packed_prefix
    shared, rows, columns = split.shared, split.row, split.columns
    out = query.new_zeros(query.shape).transpose(1, 2)  # (U, L, H, d)
    if shared > 0:
        head = F.scaled_dot_product_attention(
            query[:, :, :shared],
            key[:, :, :shared],
            value[:, :, :shared],
            is_causal=True,
            dropout_p=dropout,
            scale=scaling,
        )  # (U, H, S, d)
        out[:, :shared] = head.transpose(1, 2)
    gather = (rows.unsqueeze(1), slice(None), columns)  # -> (B, N, H, d)
    seg_q = query[gather].transpose(1, 2)  # (B, H, N, d)
    seg_k = torch.cat([key[rows, :, :shared], key[gather].transpose(1, 2)], dim=2)
    seg_v = torch.cat([value[rows, :, :shared], value[gather].transpose(1, 2)], dim=2)
    tail = F.scaled_dot_product_attention(
        seg_q, seg_k, seg_v, attn_mask=split.mask, dropout_p=dropout, scale=scaling
    )  # (B, H, N, d)
    present = split.present
    where = (rows.unsqueeze(1).expand_as(columns)[present], columns[present])
    out = out.index_put(where, tail.transpose(1, 2)[present])  # segments overwrite columns >= S_u
    return out.contiguous(), None


def enable_split_attention(model: torch.nn.Module) -> bool:
    """Switch an SDPA model to :data:`SPLIT_ATTENTION` (same results for every call; the
    packed forward then runs as split attention). Returns False, changing nothing, for a
    model on another attention implementation."""
    config = _unwrap(model).config
    if config._attn_implementation == SPLIT_ATTENTION:
        return True
    if config._attn_implementation != "sdpa":
        return False
    AttentionInterface.register(SPLIT_ATTENTION, split_attention_forward)
    AttentionMaskInterface.register(SPLIT_ATTENTION, sdpa_mask)
    config._attn_implementation = SPLIT_ATTENTION
    return True


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
    if impl not in MASK_KINDS and impl not in KERNEL_FORMS and kernel_form(impl) is None:
        return False, (
            f"attn_implementation={impl!r} cannot take the packed layout "
            f"(supported: {sorted(MASK_KINDS) + sorted(KERNEL_FORMS)})"
        )
    layer_types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)
    if layer_types is not None:
        other = sorted({t for t in layer_types if t != "full_attention"})
        if other:
            return False, f"layers of type {other} would ignore their own masks"
        # layer_types is only what the config says: Mistral's attention (and its mask) apply
        # config.sliding_window to every layer whatever layer_types holds.
        every = _window_on_every_layer(inner) if window else None
        if every is not None:
            return False, (
                f"{every} applies sliding_window={window} to every layer (config.layer_types "
                "is not read there); a packed form would ignore the window"
            )
    elif window and getattr(config, "use_sliding_window", True):
        return False, f"sliding_window={window} would be ignored by a 4-D mask"
    if "fused_lm_head" not in inspect.signature(inner.forward, follow_wrapped=False).parameters:
        return False, "the model is not patched with TRL's add_fused_lm_head"
    backbone = getattr(inner, "base_model", None)
    if backbone is None or "position_ids" not in inspect.signature(backbone.forward).parameters:
        return False, "the backbone's forward takes no position_ids"
    return True, ""


# An attention forward that reads the window from the config, not from its layer's type.
_CONFIG_WINDOW = re.compile(r"config\.sliding_window|config\s*,\s*[\"']sliding_window")


def _window_on_every_layer(inner: torch.nn.Module) -> str | None:
    """The name of the attention class when it applies ``config.sliding_window`` to every
    layer (its forward reads the config's window, as Mistral's, Mixtral's, Phi-3's and
    Starcoder2's do), else None. A forward whose source cannot be read counts as reading it
    (the packed form is then refused: the per-row forward is always right)."""
    for module in inner.modules():
        name = type(module).__name__
        if not name.endswith("Attention") or not hasattr(module, "config"):
            continue
        try:
            source = inspect.getsource(type(module).forward)
        except (OSError, TypeError):
            return name
        return name if _CONFIG_WINDOW.search(source) else None
    return None


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

    key_ok = stack("key", 0).bool()

    split = _split_layout(packed, starts, kept, inverse, key_ok)
    offsets = torch.tensor(starts, device=device) + inverse * length  # (B,)
    valid = columns.unsqueeze(0) < kept.unsqueeze(1)  # (B, C)
    index = torch.where(valid, offsets.unsqueeze(1) + columns, 0)
    return PackedLayout(
        input_ids=stack("ids", 0),
        position_ids=stack("pos", 0),
        segment=stack("seg", -2),
        key_ok=key_ok,
        shift_labels=stack("label", IGNORE_INDEX),
        index=index,
        valid=valid,
        split=split,
    )


def _split_layout(
    packed: list[dict[str, list[int]]],
    starts: list[int],
    kept: torch.Tensor,
    inverse: torch.Tensor,
    key_ok: torch.Tensor,
) -> SplitLayout:
    device = key_ok.device
    shared_len = torch.tensor([s["seg"].count(-1) for s in packed], device=device)  # (U,)
    shared = int(shared_len.max())
    n = int(kept.max())
    steps = torch.arange(n, device=device)
    present = steps.unsqueeze(0) < kept.unsqueeze(1)  # (B, N)
    columns = torch.where(present, torch.tensor(starts, device=device).unsqueeze(1) + steps, 0)
    own_ok = key_ok[inverse.unsqueeze(1), columns] & present  # (B, N) real own keys
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    own = causal & own_ok.unsqueeze(1)  # (B, Nq, Nk)
    own = own | (~present.unsqueeze(2) & torch.eye(n, dtype=torch.bool, device=device))
    prompt = torch.arange(shared, device=device) < shared_len[inverse].unsqueeze(1)  # (B, S)
    prompt = prompt.unsqueeze(1) & present.unsqueeze(2)  # padding queries see only themselves
    mask = torch.cat([prompt, own], dim=2).unsqueeze(1)  # (B, 1, N, S + N)
    return SplitLayout(shared=shared, row=inverse, columns=columns, present=present, mask=mask)


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
    *tensors: torch.Tensor,
    layout: PackedLayout | None = None,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """Per-token log-probs (B, C) of each completion after its prompt, in one forward
    (:func:`packed_prefix_forward` without the entropies; ``tensors``: its
    ``prompt_ids, prompt_mask, completion_ids, completion_mask``)."""
    return packed_prefix_forward(model, *tensors, layout=layout, chunk_rows=chunk_rows)[0]


def packed_prefix_forward(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    layout: PackedLayout | None = None,
    chunk_rows: int | None = None,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (B, C) of each completion after its prompt, in one forward, and
    with ``entropy`` the per-token entropies (B, C) of the same positions (the fused head
    must have been patched with ``"entropy"`` among its outputs, as TRL patches the policy).

    ``chunk_rows``: for no-grad calls on a whole generation batch, pack and run at most
    this many rows at a time (lay rows out group by group so that a group's rows share a
    chunk; a prompt split over two chunks is encoded in each). Leave it None under
    gradient: one forward per backward is what DDP, ZeRO and checkpointing need.

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
    if chunk_rows is not None and chunk_rows < prompt_ids.size(0):
        tensors = (prompt_ids, prompt_mask, completion_ids, completion_mask)
        parts = [
            packed_prefix_forward(model, *(t[i : i + chunk_rows] for t in tensors), entropy=entropy)
            for i in range(0, prompt_ids.size(0), chunk_rows)
        ]
        logps = torch.cat([p[0] for p in parts], dim=0)
        return logps, torch.cat([p[1] for p in parts], dim=0) if entropy else None
    if layout is None:
        layout = build_packed_layout(prompt_ids, prompt_mask, completion_ids, completion_mask)
    inputs = {}
    impl = _unwrap(model).config._attn_implementation
    if impl in KERNEL_FORMS:
        raise PackedPrefixUnsupported(
            f"attn_implementation={impl!r} runs the packed layout once switched to its "
            "kernel form (packed_kernels.enable_kernel_form)"
        )
    form = kernel_form(impl)
    ids = layout.input_ids
    if form is not None:
        # The kernel forms read their own index of the layout; the 4-D mask only tells
        # transformers that the mask is ready (passed through, not read).
        key = "packed_varlen" if form == VARLEN_ATTENTION else "packed_flex"
        inputs[key] = varlen_layout(layout) if key == "packed_varlen" else flex_block_mask(layout)
        inputs["attention_mask"] = torch.ones(
            ids.size(0), 1, 1, 1, dtype=torch.bool, device=ids.device
        )
    elif MASK_KINDS[impl] == "split":
        # The split attention reads the layout; the 4-D mask only tells transformers that the
        # mask is ready (it is passed through as is, and not read).
        inputs["packed_prefix"] = layout.split
        inputs["attention_mask"] = torch.ones(
            ids.size(0), 1, 1, 1, dtype=torch.bool, device=ids.device
        )
    else:
        inputs["attention_mask"] = attention_mask_for(model, layout.allowed)
    out = model(
        input_ids=layout.input_ids,
        position_ids=layout.position_ids,
        shift_labels=layout.shift_labels,
        fused_lm_head=True,
        **inputs,
    )

    def per_row(values: torch.Tensor) -> torch.Tensor:  # (U, L) -> (B, C)
        return torch.where(layout.valid, values.reshape(-1)[layout.index], 0.0)

    if entropy and out.entropy is None:
        raise ValueError("packed_prefix_forward(entropy=True): the fused head computes no entropy")
    return per_row(out.log_probs), per_row(out.entropy) if entropy else None
