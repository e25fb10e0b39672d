"""PRMScorer: a callable as is, and a local sequence-classification model with the
documented I/O (prefix texts, probability of the positive class), nothing downloaded."""

from __future__ import annotations

import os

import pytest
import torch

from contrastive_rlvr.trainer.stages.process_scorers import PRMScorer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)


def test_callable_scorer_is_used_as_is_and_checked():
    scorer = PRMScorer(lambda prompt, steps: [len(s) / 10 for s in steps])
    assert scorer("q", ["ab", "abcd"]) == [0.2, 0.4]
    assert scorer("q", []) == []
    with pytest.raises(ValueError, match="got 1 scores for 2 steps"):
        PRMScorer(lambda prompt, steps: [1.0])("q", ["a", "b"])


def test_prefix_texts():
    scorer = PRMScorer(lambda p, s: [0.0] * len(s), step_separator=",", prompt_separator="")
    assert scorer.prefixes("5+9+3+2=", ["14+3=17", "17+2=19"]) == [
        "5+9+3+2=14+3=17",
        "5+9+3+2=14+3=17,17+2=19",
    ]


def test_missing_model_path_is_named(tmp_path):
    with pytest.raises(ValueError, match="is not a directory"):
        PRMScorer(tmp_path / "no-such-prm")


def test_local_sequence_classification_prm(tmp_path):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from contrastive_rlvr.embedded.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        num_labels=2,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    prompt, steps = "5+9+3+2=", ["14+3=17", "17+2=19", "19"]
    scorer = PRMScorer(tmp_path, batch_size=2)  # two batches: padding is exercised
    scores = scorer(prompt, steps)
    # Reference: each prefix alone (no padding), probability of label 1.
    expected = []
    with torch.no_grad():
        for text in scorer.prefixes(prompt, steps):
            ids = tokenizer(text, return_tensors="pt")
            expected.append(torch.softmax(model(**ids).logits, -1)[0, 1].item())
    assert scores == pytest.approx(expected, abs=1e-5)
    assert all(0.0 < s < 1.0 for s in scores)
    # The score of step j depends on steps up to j only.
    assert scorer(prompt, steps[:2]) == pytest.approx(scores[:2], abs=1e-5)
