"""The tiny Llama-style model of the embedded default, built from scratch (no download).

Default size (hidden 64, 2 layers, 4 heads, MLP 256, tied embeddings) is
about 138k parameters with the 100-token character tokenizer: large enough
to learn one-digit sums in a few hundred SFT steps, small enough that a GRPO
step takes a few hundredths of a second on one CPU thread.

Positions: Llama uses rotary position embeddings, so ``max_positions`` costs
no parameters; it only bounds the sequence length. The longest sequence the
trainer runs is a BiCC loss pass: prompt + context + completion, where the
context is at most ``context_ratio * max_seq_len`` tokens (0.4 by default).
With the default task (7-token prompt with ``<bos>``, completions of at most
8 tokens) even a context budget of 0.4 * 256 = 102 tokens gives sequences of
7 + 102 + 8 = 117 tokens, so 256 leaves room for longer chains as well.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

#: Default position budget; see the module docstring for the margin it leaves.
DEFAULT_MAX_POSITIONS = 256
# Standard deviation of the normal initialisation (Llama's default
# initializer_range; written out so a config default change cannot move it).
INIT_STD = 0.02


def tiny_llama_config(
    tokenizer: PreTrainedTokenizerBase,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    mlp: int = 256,
    max_positions: int = DEFAULT_MAX_POSITIONS,
) -> LlamaConfig:
    """The :class:`LlamaConfig` of :func:`build_tiny_model` (vocabulary and special ids
    taken from ``tokenizer``)."""
    for name, value in (("hidden", hidden), ("layers", layers), ("heads", heads), ("mlp", mlp)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
    if (hidden // heads) % 2:
        raise ValueError(
            f"head size hidden/heads = {hidden // heads} must be even for rotary embeddings"
        )
    if max_positions < 16:
        raise ValueError(f"max_positions must be >= 16, got {max_positions}")
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=mlp,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        initializer_range=INIT_STD,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase, *, seed: int = 0, **shape: int
) -> LlamaForCausalLM:
    """A freshly initialised :class:`LlamaForCausalLM` with tied input/output embeddings;
    ``shape``: :func:`tiny_llama_config`'s ``hidden``, ``layers``, ``heads``, ``mlp``,
    ``max_positions``.

    Parameters: ``V*h`` (embedding, shared with the output head) ``+ layers *
    (4*h*h + 3*h*mlp + 2*h) + h`` (attention q/k/v/o without biases, gated
    MLP, two RMSNorms per layer, final norm). Defaults with V = 100:
    6400 + 2 * 65664 + 64 = 137792.

    Deterministic for a ``seed``: the weights are drawn under a forked RNG, so
    the caller's global torch RNG is left untouched. The model is returned in
    float32, on the CPU, in train mode; its ``generation_config`` is set for
    plain temperature-1 sampling (no top-k/top-p filtering, stop at ``<eos>``).
    """
    config = tiny_llama_config(tokenizer, **shape)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    # Sampling by default, and without generate()'s top_k=50 default, which would
    # not be temperature-1 sampling (top_k=0 alone fails validation on save).
    model.generation_config.do_sample = True
    model.generation_config.temperature = 1.0
    model.generation_config.top_k = 0
    model.generation_config.top_p = 1.0
    model.train()
    return model
