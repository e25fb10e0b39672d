"""Offline stand-ins for the Hub repositories TRL's GRPO tests load.

Models: every supported ``trl-internal-testing/tiny-*`` id is rebuilt locally as a
randomly initialised model of the same transformers architecture class (2 layers,
hidden size 8 or 16, bf16 like the Hub originals), with a byte-level tokenizer whose
special tokens and chat template are those of the model family (the template text
comes from the installed ``trl`` package's own ``chat_templates/``, so TRL recognises
it exactly as it recognises the real one). They are written once into a private
Hugging Face hub cache (``HF_HUB_CACHE``) in the standard ``models--org--name`` layout,
so ``from_pretrained("trl-internal-testing/tiny-...")`` resolves offline through the
normal code path: nothing is monkeypatched on the model-loading side.

Datasets: ``trl-internal-testing/zen`` (and the image variants) as small in-memory
``datasets.Dataset`` objects with the same configurations, splits and columns.

What a stand-in cannot reproduce: the real vocabulary (byte-level here, so token
counts differ) and trained weights (the Hub tiny models are random too).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Bump when a builder changes: it is part of the snapshot hash, so stale caches rebuild.
BUILDER_VERSION = "5"
# TRL_PARITY_REAL_VOCAB=1: Qwen2.5 / Qwen3 / Llama-3 stand-ins with the real vocabulary size
# and special-token ids (151k / 128k ids). Off by default: a 151k-wide output layer makes
# every test several times slower on a small CPU machine; see docs/trl-parity.md for the
# two tests that need it.
REAL_VOCAB = os.environ.get("TRL_PARITY_REAL_VOCAB", "0") == "1"
ORG = "trl-internal-testing"


# --------------------------------------------------------------------------- tokenizers
@dataclass(frozen=True)
class Family:
    """Tokenizer conventions of one model family (special tokens, chat template)."""

    template: str | None  # name of a trl/chat_templates/*.jinja file, None: ``own_template``
    eos: str
    pad: str | None
    bos: str | None = None
    unk: str | None = None
    extra_eos: tuple[str, ...] = ()  # further generation-config eos tokens
    extra_tokens: tuple[str, ...] = ()
    own_template: str | None = None
    # Real vocabulary size and the real ids of its special tokens, for families whose
    # tests hard-code token ids (Qwen's 151643/151645) or rely on a realistic chance of
    # sampling EOS (about 1 / vocabulary size per token); None: 256 bytes + specials.
    vocab_size: int | None = None
    fixed_ids: tuple[tuple[str, int], ...] = ()


# A minimal [INST] template for Mistral-0.2 (TRL ships none for it).
_MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% endif %}{% endfor %}"
)

# Qwen2.5's added tokens from id 151643 on, in order; Qwen3 appends four more.
_QWEN2_5_SPECIALS = (
    "<|endoftext|> <|im_start|> <|im_end|> <|object_ref_start|> <|object_ref_end|> "
    "<|box_start|> <|box_end|> <|quad_start|> <|quad_end|> <|vision_start|> <|vision_end|> "
    "<|vision_pad|> <|image_pad|> <|video_pad|> <tool_call> </tool_call> <|fim_prefix|> "
    "<|fim_middle|> <|fim_suffix|> <|fim_pad|> <|repo_name|> <|file_sep|>"
).split()
_QWEN3_SPECIALS = (*_QWEN2_5_SPECIALS, "<tool_response>", "</tool_response>", "<think>", "</think>")
# Llama 3's 256 special ids from 128000 on: the named ones, the rest reserved.
_LLAMA3_NAMED = {
    128000: "<|begin_of_text|>",
    128001: "<|end_of_text|>",
    128004: "<|finetune_right_pad_id|>",
    128006: "<|start_header_id|>",
    128007: "<|end_header_id|>",
    128008: "<|eom_id|>",
    128009: "<|eot_id|>",
    128010: "<|python_tag|>",
}
_LLAMA3_SPECIALS = tuple(
    (_LLAMA3_NAMED.get(i, f"<|reserved_special_token_{i - 128000}|>"), i)
    for i in range(128000, 128256)
)

FAMILIES: dict[str, Family] = {
    "qwen2_5": Family(
        "qwen2_5.jinja",
        eos="<|im_end|>",
        pad="<|endoftext|>",
        extra_eos=("<|endoftext|>",),
        vocab_size=151643 + len(_QWEN2_5_SPECIALS),
        fixed_ids=tuple((t, 151643 + i) for i, t in enumerate(_QWEN2_5_SPECIALS)),
    ),
    "qwen3": Family(
        "qwen3.jinja",
        eos="<|im_end|>",
        pad="<|endoftext|>",
        extra_eos=("<|endoftext|>",),
        vocab_size=151643 + len(_QWEN3_SPECIALS),
        fixed_ids=tuple((t, 151643 + i) for i, t in enumerate(_QWEN3_SPECIALS)),
    ),
    "llama3_2": Family(
        "llama3_2.jinja",
        eos="<|eot_id|>",
        pad=None,
        bos="<|begin_of_text|>",
        extra_eos=("<|end_of_text|>", "<|eom_id|>"),
        extra_tokens=("<|end_of_text|>", "<|eom_id|>"),
        vocab_size=128256,
        fixed_ids=_LLAMA3_SPECIALS,
    ),
    "mistral": Family(
        None, eos="</s>", pad=None, bos="<s>", unk="<unk>", own_template=_MISTRAL_TEMPLATE
    ),
    "gemma": Family(
        "gemma.jinja",
        eos="<eos>",
        pad="<pad>",
        bos="<bos>",
        extra_eos=("<end_of_turn>",),
        extra_tokens=("<end_of_turn>",),
    ),
    "cohere2": Family("cohere2.jinja", eos="<|END_OF_TURN_TOKEN|>", pad="<PAD>", bos="<BOS_TOKEN>"),
    "glm4moe": Family(
        "glm4moe.jinja",
        eos="<|endoftext|>",
        pad="<|endoftext|>",
        extra_eos=("<|user|>", "<|observation|>"),
    ),
    "gptoss": Family(
        "gptoss.jinja",
        eos="<|return|>",
        pad="<|endoftext|>",
        bos="<|startoftext|>",
        extra_eos=("<|call|>",),
        extra_tokens=("<|endoftext|>",),
    ),
    "gemma3": Family(
        "gemma3.jinja",
        eos="<eos>",
        pad="<pad>",
        bos="<bos>",
        extra_eos=("<end_of_turn>",),
        extra_tokens=("<end_of_turn>", "<start_of_image>", "<image_soft_token>", "<end_of_image>"),
    ),
    "nemotron_h": Family(
        "nemotron_3_nano.jinja", eos="<|im_end|>", pad="<unk>", bos="<s>", unk="<unk>"
    ),
}

# Special-looking tokens in a template: ``<|...|>``, ``<tag>``/``</tag>``, ``[gMASK]``, ``<sop>``.
_SPECIAL_RE = re.compile(r"<\|[A-Za-z0-9_]+\|>|</?[a-z_]+>|<[A-Z_]+>|\[gMASK\]")
_HTML_LIKE = {"<br>", "<p>", "<b>", "<i>"}


def _template_text(family: Family) -> str:
    if family.template is None:
        return family.own_template or ""
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / family.template).read_text()


def _byte_alphabet() -> list[str]:
    """The 256 byte-level characters in GPT-2's order (printable bytes first, then the
    rest shifted past 255), so byte ``b``'s token id is the one GPT-2, Qwen and Llama 3 use.
    """
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars, shift = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + shift)
            shift += 1
    order = printable + [b for b in range(256) if b not in printable]
    return [chars[b] for b in order]


def build_tokenizer(family: Family) -> Any:
    """A byte-level BPE tokenizer (256 byte tokens, no merges) plus the family's specials.

    With ``family.vocab_size`` the vocabulary has that size: the specials sit at their
    real ids and the ids no byte or special uses hold filler tokens (``t<id>``, decoding
    to that text), which the model can sample but the encoder never produces.
    Tokens of the form ``<|...|>`` and the family's bos/eos/pad/unk are special (dropped
    by ``skip_special_tokens``); ``<tag>`` tokens such as ``<think>`` or ``<tool_call>`` are
    added as ordinary tokens, as the real Qwen tokenizers do, so they survive decoding.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    template = _template_text(family)
    found = [t for t in dict.fromkeys(_SPECIAL_RE.findall(template)) if t not in _HTML_LIKE]
    if family.fixed_ids:  # a known vocabulary: its added tokens are exactly the fixed ones
        found = []
    named = [t for t in (family.bos, family.eos, family.pad, family.unk) if t]
    fixed = dict(family.fixed_ids) if REAL_VOCAB else {}
    vocab_size = family.vocab_size if REAL_VOCAB else None
    ordered = [t for t, _ in family.fixed_ids]  # small vocabulary: same specials, same order
    candidates = list(dict.fromkeys(ordered + named + found + list(family.extra_tokens)))
    special = [
        t
        for t in candidates
        if t in named or t.startswith(("<|", "[")) or t.isupper() or t.startswith("<unk")
    ]
    plain = [t for t in candidates if t not in special]
    vocab = {ch: i for i, ch in enumerate(_byte_alphabet())}
    for token, idx in fixed.items():
        vocab[token] = idx
    if vocab_size is not None:
        taken = set(vocab.values())
        for idx in range(vocab_size):
            if idx not in taken:
                vocab[f"t{idx}"] = idx
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=family.bos,
        eos_token=family.eos,
        pad_token=family.pad,
        unk_token=family.unk,
        additional_special_tokens=[t for t in special if t not in named],
    )
    tok.add_tokens(plain)
    tok.chat_template = template
    tok.model_max_length = 32768
    for token, idx in fixed.items():
        if tok.convert_tokens_to_ids(token) != idx:
            raise RuntimeError(f"stand-in tokenizer put {token} at a wrong id")
    if vocab_size is not None and len(tok) != vocab_size:
        raise RuntimeError(f"stand-in tokenizer has {len(tok)} ids, not {vocab_size}")
    return tok


# --------------------------------------------------------------------------- models
@dataclass(frozen=True)
class TinyModel:
    """One Hub id: the transformers config class, model class and config overrides."""

    family: str
    config_cls: str
    model_cls: str
    kwargs: dict[str, Any] = field(default_factory=dict)


_SMALL = {
    "hidden_size": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 32,
}
_SEQ = {**_SMALL, "hidden_size": 16, "num_labels": 1}

MODELS: dict[str, TinyModel] = {
    f"{ORG}/tiny-Qwen2ForCausalLM-2.5": TinyModel(
        "qwen2_5", "Qwen2Config", "Qwen2ForCausalLM", _SMALL
    ),
    f"{ORG}/tiny-Qwen2ForSequenceClassification-2.5": TinyModel(
        "qwen2_5", "Qwen2Config", "Qwen2ForSequenceClassification", _SEQ
    ),
    f"{ORG}/tiny-Qwen3ForCausalLM": TinyModel("qwen3", "Qwen3Config", "Qwen3ForCausalLM", _SMALL),
    f"{ORG}/tiny-Qwen3ForSequenceClassification": TinyModel(
        "qwen3", "Qwen3Config", "Qwen3ForSequenceClassification", _SEQ
    ),
    f"{ORG}/tiny-LlamaForCausalLM-3.2": TinyModel(
        "llama3_2", "LlamaConfig", "LlamaForCausalLM", _SMALL
    ),
    f"{ORG}/tiny-LlamaForSequenceClassification-3.2": TinyModel(
        "llama3_2", "LlamaConfig", "LlamaForSequenceClassification", _SEQ
    ),
    f"{ORG}/tiny-MistralForCausalLM-0.2": TinyModel(
        "mistral", "MistralConfig", "MistralForCausalLM", _SMALL
    ),
    f"{ORG}/tiny-Gemma2ForCausalLM": TinyModel(
        "gemma", "Gemma2Config", "Gemma2ForCausalLM", _SMALL
    ),
    f"{ORG}/tiny-Cohere2ForCausalLM": TinyModel(
        "cohere2", "Cohere2Config", "Cohere2ForCausalLM", _SMALL
    ),
    f"{ORG}/tiny-Qwen3MoeForCausalLM": TinyModel(
        "qwen3",
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        {
            **_SMALL,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "norm_topk_prob": True,
        },
    ),
    f"{ORG}/tiny-GptOssForCausalLM": TinyModel(
        "gptoss",
        "GptOssConfig",
        "GptOssForCausalLM",
        {**_SMALL, "num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 8},
    ),
    f"{ORG}/tiny-Glm4MoeForCausalLM": TinyModel(
        "glm4moe",
        "Glm4MoeConfig",
        "Glm4MoeForCausalLM",
        {
            **_SMALL,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "n_shared_experts": 1,
            "first_k_dense_replace": 1,
            "n_group": 1,
            "topk_group": 1,
            "head_dim": 8,
        },
    ),
    # Vision-language: Gemma3's processor needs no torchvision (the Qwen-VL ones do, and
    # torchvision is not installed here), so it is the one VLM stand-in.
    f"{ORG}/tiny-Gemma3ForConditionalGeneration": TinyModel(
        "gemma3",
        "Gemma3Config",
        "Gemma3ForConditionalGeneration",
        {
            "text_config": {**_SMALL, "hidden_size": 16, "head_dim": 8},
            "vision_config": {
                "hidden_size": 16,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "intermediate_size": 32,
                "image_size": 28,
                "patch_size": 14,
            },
            "mm_tokens_per_image": 4,
        },
    ),
    f"{ORG}/tiny-NemotronHForCausalLM-nano": TinyModel(
        "nemotron_h",
        "NemotronHConfig",
        "NemotronHForCausalLM",
        {
            "hidden_size": 16,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "intermediate_size": 32,
            "layers_block_type": ["mamba", "attention"],
            "mamba_num_heads": 4,
            "mamba_head_dim": 8,
            "ssm_state_size": 8,
            "n_groups": 1,
            "mamba_chunk_size": 16,
        },
    ),
}


def _snapshot_hash(model_id: str) -> str:
    spec = MODELS[model_id]
    key = json.dumps(
        [
            REAL_VOCAB,
            BUILDER_VERSION,
            model_id,
            spec.config_cls,
            spec.model_cls,
            spec.kwargs,
            FAMILIES[spec.family].__repr__(),
        ],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha1(key.encode()).hexdigest()


def build_model(model_id: str, out_dir: Path) -> None:
    """Save config, random bf16 weights, tokenizer and generation config under ``out_dir``."""
    import torch
    import transformers

    spec = MODELS[model_id]
    family = FAMILIES[spec.family]
    tok = build_tokenizer(family)
    ids = {
        name: tok.convert_tokens_to_ids(t) if t else None
        for name, t in (("bos", family.bos), ("eos", family.eos), ("pad", family.pad))
    }
    special = {
        "bos_token_id": ids["bos"],
        "eos_token_id": ids["eos"],
        "pad_token_id": ids["pad"] if ids["pad"] is not None else ids["eos"],
    }
    kwargs = dict(spec.kwargs)
    if spec.family == "gemma3":
        kwargs["text_config"] = {**kwargs["text_config"], "vocab_size": len(tok), **special}
        kwargs.update(
            boi_token_index=tok.convert_tokens_to_ids("<start_of_image>"),
            eoi_token_index=tok.convert_tokens_to_ids("<end_of_image>"),
            image_token_index=tok.convert_tokens_to_ids("<image_soft_token>"),
        )
        config = getattr(transformers, spec.config_cls)(**kwargs)
    else:
        config = getattr(transformers, spec.config_cls)(
            vocab_size=len(tok), tie_word_embeddings=False, **special, **kwargs
        )
    torch.manual_seed(int(_snapshot_hash(model_id)[:8], 16))
    model = getattr(transformers, spec.model_cls)(config).to(torch.bfloat16)
    eos = [ids["eos"], *(tok.convert_tokens_to_ids(t) for t in family.extra_eos)]
    gen = transformers.GenerationConfig(
        bos_token_id=ids["bos"],
        eos_token_id=eos if len(eos) > 1 else eos[0],
        pad_token_id=special["pad_token_id"],
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    if spec.family == "gemma3":
        # Gemma3's processor reads the image tokens from the tokenizer's named extras, which
        # the tokenizer takes from its saved config only.
        tok.save_pretrained(out_dir)
        tok_config = out_dir / "tokenizer_config.json"
        saved = json.loads(tok_config.read_text())
        saved["extra_special_tokens"] = {
            "boi_token": "<start_of_image>",
            "image_token": "<image_soft_token>",
            "eoi_token": "<end_of_image>",
        }
        tok_config.write_text(json.dumps(saved, indent=2))
        tok = transformers.AutoTokenizer.from_pretrained(out_dir)
        side = kwargs["vision_config"]["image_size"]
        processor = transformers.Gemma3Processor(
            image_processor=transformers.Gemma3ImageProcessorPil(
                size={"height": side, "width": side}
            ),
            tokenizer=tok,
            chat_template=tok.chat_template,
            image_seq_length=kwargs["mm_tokens_per_image"],
        )
        processor.save_pretrained(out_dir)
    else:
        tok.save_pretrained(out_dir)
    if "SequenceClassification" not in spec.model_cls:
        gen.save_pretrained(out_dir)


def ensure_hub_cache(
    cache_dir: Path, model_ids: list[str] | None = None, log: Callable[[str], None] = print
) -> Path:
    """Populate ``cache_dir`` (used as ``HF_HUB_CACHE``) with every stand-in; idempotent.

    Each repository is ``models--org--name/refs/main`` -> ``snapshots/<hash>/``, the hub
    cache layout ``huggingface_hub`` resolves offline. A model is rebuilt only when its
    builder's hash changes.
    """
    import fcntl

    cache_dir.mkdir(parents=True, exist_ok=True)
    # Two runs (the two modes with --parallel) may start at once: build under a lock.
    with open(cache_dir / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _ensure_locked(cache_dir, model_ids, log)
    return cache_dir


def _ensure_locked(cache_dir: Path, model_ids: list[str] | None, log: Callable[[str], None]):
    for model_id in model_ids or list(MODELS):
        repo = cache_dir / ("models--" + model_id.replace("/", "--"))
        digest = _snapshot_hash(model_id)
        snap = repo / "snapshots" / digest
        ref = repo / "refs" / "main"
        if snap.is_dir() and ref.is_file() and ref.read_text() == digest:
            continue
        log(f"trl-parity: building offline stand-in for {model_id}")
        tmp = repo / "snapshots" / (digest + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        build_model(model_id, tmp)
        shutil.rmtree(snap, ignore_errors=True)
        tmp.rename(snap)
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(digest)


# --------------------------------------------------------------------------- datasets
# The Zen of Python, split into a prompt (the opening words) and its completion; the first
# twelve prompts are the ones TRL's tests name (test_prepare_input_called_with_correct_data).
_ZEN = [
    ("Beautiful is better than", " ugly."),
    ("Explicit is", " better than implicit."),
    ("Simple is better", " than complex."),
    ("Complex", " is better than complicated."),
    ("Flat is better than", " nested."),
    ("Sparse is better", " than dense."),
    ("Readability", " counts."),
    ("Special cases aren't special", " enough to break the rules."),
    ("Although practicality beats", " purity."),
    ("Errors should never", " pass silently."),
    ("Unless explicitly", " silenced."),
    ("In the face of ambiguity, refuse", " the temptation to guess."),
    ("There should be one-- and preferably only one --obvious", " way to do it."),
    ("Although that way may not be obvious at first unless", " you're Dutch."),
    ("Now is better", " than never."),
    ("Although never is often better than", " *right* now."),
    ("If the implementation is hard to explain,", " it's a bad idea."),
    ("If the implementation is easy to explain,", " it may be a good idea."),
    ("Namespaces are one honking great idea --", " let's do more of those!"),
]
_TEST_ROWS = 2  # the last rows form the test split
DATASETS = (
    "trl-internal-testing/zen",
    "trl-internal-testing/zen-image",
    "trl-internal-testing/zen-multi-image",
)


def _rows(dataset_id: str, config: str) -> list[dict]:
    rows = []
    for i, (prompt, _) in enumerate(_ZEN):
        if config == "standard_prompt_only":
            row: dict[str, Any] = {"prompt": prompt}
        elif config == "conversational_prompt_only":
            if dataset_id.endswith("image"):
                content = [{"type": "image"}, {"type": "text", "text": prompt}]
                if dataset_id.endswith("multi-image"):
                    content = [{"type": "image"}, *content]
                row = {"prompt": [{"role": "user", "content": content}]}
            else:
                row = {"prompt": [{"role": "user", "content": prompt}]}
        else:
            raise ValueError(f"no offline stand-in for {dataset_id!r} config {config!r}")
        if dataset_id.endswith("multi-image"):
            row["images"] = [_image(i, 16), _image(i + 1, 24)]
        elif dataset_id.endswith("image"):
            row["image"] = _image(i, 16 + 2 * (i % 3))
        rows.append(row)
    return rows


def _image(seed: int, size: int) -> Any:
    from PIL import Image

    return Image.new("RGB", (size, size), color=((37 * seed) % 256, (91 * seed) % 256, 128))


def load_dataset_offline(
    path: str,
    name: str | None = None,
    *,
    split: str | None = None,
    streaming: bool = False,
    **kwargs: Any,
) -> Any:
    """``datasets.load_dataset`` for the ids in :data:`DATASETS`, from memory."""
    from datasets import Dataset, DatasetDict, Image, IterableDatasetDict, Sequence

    if path not in DATASETS:
        raise ValueError(f"no offline stand-in for dataset {path!r} (known: {', '.join(DATASETS)})")
    config = name or kwargs.pop("name", None) or "standard_prompt_only"
    rows = _rows(path, config)
    columns = {key: [r[key] for r in rows] for key in rows[0]}
    full = Dataset.from_dict(columns)
    if "image" in full.column_names:
        full = full.cast_column("image", Image())
    if "images" in full.column_names:
        full = full.cast_column("images", Sequence(Image()))
    n = len(full)
    splits = {
        "train": full.select(range(n - _TEST_ROWS)),
        "test": full.select(range(n - _TEST_ROWS, n)),
    }
    if split is not None:
        if split not in splits:
            raise ValueError(f"unknown split {split!r} for {path!r}: use 'train' or 'test'")
        ds = splits[split]
        return ds.to_iterable_dataset() if streaming else ds
    if streaming:
        return IterableDatasetDict({k: v.to_iterable_dataset() for k, v in splits.items()})
    return DatasetDict(splits)
