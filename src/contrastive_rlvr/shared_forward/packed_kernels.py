"""The packed forward's attention on the kernels GPU users load models with: flash
attention's variable-length kernel and PyTorch's ``flex_attention``.

:mod:`.packed_prefix` lays each distinct prompt out once, then the segments of the rows
that share it. Its split form runs SDPA twice (the prompts' shared parts causally, then
each segment over [its prompt ; itself]). The same two steps map onto:

- **flash varlen** (:data:`VARLEN_ATTENTION`, for a model on ``flash_attention_2``):
  ``flash_attn_varlen_func`` takes sequences concatenated along one axis with
  ``cu_seqlens`` offsets and, with ``causal=True`` and more keys than queries, aligns the
  causal mask at the end (query i of a sequence with ``n_q`` queries and ``n_k`` keys sees
  keys ``j <= i + n_k - n_q``). Call 1: each prompt's shared part, queries = keys. Call 2:
  each segment's queries over the keys [its prompt's shared part ; its own tokens]: the
  end alignment lets query i see the whole prompt and its own tokens up to i. A key no
  one may see inside a completion (a 0 inside ``completion_mask``) has no varlen form: such
  a batch raises :class:`~.layout.PackedPrefixUnsupported` and runs per row.
  Where ``flash_attn`` is not importable, :func:`varlen_attention_reference` (pure torch,
  the kernel's semantics) runs instead; the tests run it on CPU in values and gradients.
- **flex** (:data:`FLEX_ATTENTION`, for a model on ``flex_attention``): one call over the
  packed rows with a block mask (a token attends its own segment causally and its
  prompt's shared part); blocks wholly outside the mask are skipped, so the prompt's
  blocks are computed once, as in the split form. PyTorch 2.13 has no flex backward on
  CPU: the CPU test is forward-only; the GPU check runs it with gradients.

Calls without the packed layout (generation, the per-row forward) go to the model's own
implementation, with its own mask function.

An attention argument a packed form does not implement (:data:`UNIMPLEMENTED_ARGUMENTS`:
Gemma-2's logit ``softcap``, a ``sliding_window``, gpt-oss's sinks ``s_aux``) is refused,
never dropped: with a value, the packed call raises
:class:`~.packed_prefix.PackedPrefixUnsupported` (the probe then reports it and the run
goes per row). Dropping one gives log-probs that are close but not the model's (Gemma-2's
cap of 50 moves them by ~1e-5 nats, within any rounding tolerance), so no tolerance could
catch it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv
from transformers.masking_utils import AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .layout import PackedLayout, PackedPrefixUnsupported, _unwrap

logger = logging.getLogger(__name__)

# Names without "flash": transformers keys flash-specific input handling on that substring.
VARLEN_ATTENTION = "varlen_packed_prefix"
FLEX_ATTENTION = "flex_packed_prefix"
#: The model's attention implementation -> the packed form it is switched to.
KERNEL_FORMS = {"flash_attention_2": VARLEN_ATTENTION, "flex_attention": FLEX_ATTENTION}

VarlenKernel = Callable[..., torch.Tensor]

#: Keyword arguments transformers' attention modules pass that change the scores and that
#: no packed form (split SDPA, flash varlen, flex) implements: refused when not None.
UNIMPLEMENTED_ARGUMENTS = ("softcap", "sliding_window", "s_aux")


def refuse_unimplemented(module: torch.nn.Module, form: str, kwargs: dict) -> None:
    """Raise ``PackedPrefixUnsupported`` when the attention call carries an argument of
    :data:`UNIMPLEMENTED_ARGUMENTS` with a value (the packed ``form`` would drop it)."""
    for name in UNIMPLEMENTED_ARGUMENTS:
        value = kwargs.get(name)
        if value is not None:
            shown = "a tensor" if isinstance(value, torch.Tensor) else repr(value)
            raise PackedPrefixUnsupported(
                f"{type(module).__name__} passes {name}={shown} to its attention, which the "
                f"packed {form} form does not implement"
            )


@dataclass
class VarlenLayout:
    """The packed rows as flash varlen's concatenated sequences (indices into the U * L
    flattened packed tokens).

    Attributes:
        shared_index: (n_s,) the prompts' shared tokens, prompt by prompt.
        cu_shared: (U + 1,) int32 offsets of each prompt's shared part; max_shared its max.
        query_index: (n_q,) the segments' tokens, segment by segment.
        key_index: (n_k,) per segment, its prompt's shared tokens then its own.
        cu_query, cu_key: (B + 1,) int32 offsets; max_query, max_key their longest.
    """

    shared_index: torch.Tensor
    cu_shared: torch.Tensor
    max_shared: int
    query_index: torch.Tensor
    key_index: torch.Tensor
    cu_query: torch.Tensor
    cu_key: torch.Tensor
    max_query: int
    max_key: int


def _offsets(lengths: list[int], device: torch.device) -> torch.Tensor:
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device=device)


def varlen_layout(layout: PackedLayout) -> VarlenLayout:
    """Index the packed layout for flash varlen; raises ``PackedPrefixUnsupported`` when a
    segment has a key no one may see (varlen masks by lengths only)."""
    seg, key_ok = layout.segment, layout.key_ok
    device, length = seg.device, seg.size(1)
    if bool((~key_ok & (seg >= 0)).any()):
        raise PackedPrefixUnsupported(
            "a completion has a masked token before its last scored one (flash varlen "
            "masks by sequence lengths only)"
        )
    seg_list = seg.tolist()
    shared, shared_len = [], []
    starts: dict[int, tuple[int, int]] = {}  # row b -> (packed row, first column)
    counts: dict[int, int] = {}
    for u, row in enumerate(seg_list):
        cols = [c for c, s in enumerate(row) if s == -1]
        shared.append([u * length + c for c in cols])
        shared_len.append(len(cols))
        for c, s in enumerate(row):
            if s >= 0:
                starts.setdefault(s, (u, c))
                counts[s] = counts.get(s, 0) + 1
    query, key, q_len, k_len = [], [], [], []
    for b in sorted(starts):
        u, first = starts[b]
        own = [u * length + first + i for i in range(counts[b])]
        query += own
        key += shared[u] + own
        q_len.append(len(own))
        k_len.append(len(shared[u]) + len(own))

    def index(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return VarlenLayout(
        shared_index=index([i for part in shared for i in part]),
        cu_shared=_offsets(shared_len, device),
        max_shared=max(shared_len),
        query_index=index(query),
        key_index=index(key),
        cu_query=_offsets(q_len, device),
        cu_key=_offsets(k_len, device),
        max_query=max(q_len),
        max_key=max(k_len),
    )


def varlen_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """``flash_attn_varlen_func`` in pure torch, for CPU and for machines without the kernel.

    ``q`` (n_q, H, d), ``k`` / ``v`` (n_k, H_kv, d) with H a multiple of H_kv; sequence i
    is rows ``cu_seqlens_q[i]:cu_seqlens_q[i+1]`` of q and ``cu_seqlens_k[i]:...`` of k.
    ``causal``: query t of a sequence of ``n_q`` queries and ``n_k`` keys sees keys
    ``j <= t + n_k - n_q`` (the kernel's alignment at the end); a query that sees no key
    gives 0. Returns (n_q, H, d). ``max_seqlen_*`` are accepted for the kernel's
    signature."""
    groups = q.size(1) // k.size(1)
    out = q.new_zeros(q.shape)
    for i in range(cu_seqlens_q.numel() - 1):
        q0, q1 = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
        k0, k1 = int(cu_seqlens_k[i]), int(cu_seqlens_k[i + 1])
        n_q, n_k = q1 - q0, k1 - k0
        if n_q == 0:
            continue
        qi = q[q0:q1].transpose(0, 1)  # (H, n_q, d)
        ki = k[k0:k1].transpose(0, 1).repeat_interleave(groups, 0)
        vi = v[k0:k1].transpose(0, 1).repeat_interleave(groups, 0)
        mask = None
        if causal:
            rows = torch.arange(n_q, device=q.device).unsqueeze(1)
            mask = torch.arange(n_k, device=q.device).unsqueeze(0) <= rows + (n_k - n_q)
            empty = ~mask.any(1)  # queries with no key: the kernel writes 0
            mask = mask | empty.unsqueeze(1)
        oi = F.scaled_dot_product_attention(
            qi, ki, vi, attn_mask=mask, dropout_p=dropout_p, scale=softmax_scale
        )  # (H, n_q, d)
        if causal and bool(empty.any()):
            oi = oi.masked_fill(empty.view(1, -1, 1), 0.0)
        out[q0:q1] = oi.transpose(0, 1)
    return out


def flash_varlen_kernel() -> tuple[VarlenKernel, str]:
    """flash-attn's ``flash_attn_varlen_func`` when importable, else the pure-torch stand-in;
    and its name, for the log."""
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return varlen_attention_reference, "pure-torch stand-in (flash_attn not importable)"
    return flash_attn_varlen_func, "flash_attn.flash_attn_varlen_func"


def varlen_split_forward(
    kernel: VarlenKernel,
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    dropout: float,
    scaling: float | None,
    varlen: VarlenLayout,
) -> torch.Tensor:
    """The split form on flash varlen: ``query`` (U, H, L, d), ``key``/``value``
    (U, H_kv, L, d) -> (U, L, H, d). Padding columns get 0."""
    units, heads, length, dim = query.shape
    dropout = dropout if module.training else 0.0

    def flat(x: torch.Tensor) -> torch.Tensor:  # (U, h, L, d) -> (U * L, h, d)
        return x.transpose(1, 2).reshape(units * length, x.size(1), dim)

    q, k, v = flat(query), flat(key), flat(value)
    attend = functools.partial(kernel, dropout_p=dropout, softmax_scale=scaling, causal=True)
    out = q.new_zeros(q.shape)
    if varlen.shared_index.numel() > 0:
        s, cu, widest = varlen.shared_index, varlen.cu_shared, varlen.max_shared
        out = out.index_put((s,), attend(q[s], k[s], v[s], cu, cu, widest, widest))
    kq, kk = varlen.query_index, varlen.key_index
    tail = attend(
        q[kq], k[kk], v[kk], varlen.cu_query, varlen.cu_key, varlen.max_query, varlen.max_key
    )
    out = out.index_put((kq,), tail)
    return out.view(units, length, heads, dim)


def flex_block_mask(layout: PackedLayout):
    """The packed layout's mask as a flex ``BlockMask`` over (U, L, L): a query attends the
    shared prompt part and its own segment causally, on keys others may see; padding
    attends itself."""
    from torch.nn.attention.flex_attention import create_block_mask

    seg, key_ok = layout.segment, layout.key_ok

    def mask_mod(b, h, q, k):
        sq, sk = seg[b, q], seg[b, k]
        pad = sq == -2
        seen = ((sq == sk) | (sk == -1)) & (k <= q) & key_ok[b, k] & ~pad
        return seen | (pad & (q == k))

    units, length = seg.shape
    return create_block_mask(mask_mod, units, None, length, length, device=seg.device)


def flex_packed_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scaling: float | None,
    block_mask,
) -> torch.Tensor:
    """``query`` (U, H, L, d), ``key``/``value`` (U, H_kv, L, d) -> (U, L, H, d)."""
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    out = _flex(query.is_cuda)(query, key, value, block_mask=block_mask, scale=scaling)
    return out.transpose(1, 2).contiguous()


_COMPILED_FLEX: list[Callable] = []


def _flex(cuda: bool) -> Callable:
    """flex_attention, compiled on CUDA (the fused kernel; eager flex materialises the
    scores); eager on CPU, where PyTorch 2.13 compiles no flex kernel."""
    from torch.nn.attention.flex_attention import flex_attention

    if not cuda:
        return flex_attention
    if not _COMPILED_FLEX:
        _COMPILED_FLEX.append(torch.compile(flex_attention))
    return _COMPILED_FLEX[0]


def _attention(base: str, kernel: VarlenKernel | None) -> Callable:
    """The attention function of a kernel form: the packed call when the layout is passed,
    else the model's own implementation ``base``."""
    own = ALL_ATTENTION_FUNCTIONS[base]

    def attention(
        module,
        query,
        key,
        value,
        attention_mask,
        dropout=0.0,
        scaling=None,
        packed_varlen=None,
        packed_flex=None,
        **kwargs,
    ):
        if packed_varlen is not None or packed_flex is not None:
            refuse_unimplemented(module, "varlen" if packed_varlen is not None else "flex", kwargs)
        if packed_varlen is not None:
            out = varlen_split_forward(
                kernel, module, query, key, value, dropout, scaling, packed_varlen
            )
            return out, None
        if packed_flex is not None:
            return flex_packed_forward(module, query, key, value, scaling, packed_flex), None
        return own(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )

    return attention


def enable_kernel_form(
    model: torch.nn.Module, *, form: str | None = None, kernel: VarlenKernel | None = None
) -> str | None:
    """Switch a model on ``flash_attention_2`` / ``flex_attention`` to its packed form
    (:data:`KERNEL_FORMS`), or with ``form`` any model to that form over its own
    implementation (the tests run the varlen form on an SDPA model with the stand-in).
    Returns the form's name, or None (nothing changed) for another implementation."""
    config = _unwrap(model).config
    impl = config._attn_implementation
    if kernel_form(impl) is not None:
        return impl
    form = form or KERNEL_FORMS.get(impl)
    if form is None:
        return None
    if form == VARLEN_ATTENTION and kernel is None:
        kernel, name = flash_varlen_kernel()
        logger.info("flash varlen packed form: %s", name)
    name = f"{form}:{impl}"
    AttentionInterface.register(name, _attention(impl, kernel))
    AttentionMaskInterface.register(name, AttentionMaskInterface._global_mapping[impl])
    config._attn_implementation = name
    return name


def kernel_form(impl: str | None) -> str | None:
    """:data:`VARLEN_ATTENTION` / :data:`FLEX_ATTENTION` for a switched implementation name."""
    if not impl:
        return None
    head = impl.split(":", 1)[0]
    return head if head in (VARLEN_ATTENTION, FLEX_ATTENTION) else None
