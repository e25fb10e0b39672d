"""The embedded reading warm start from the run config: ``embedded_sft_context_frac``
reaches the warm start a run builds, and compare's warm-start cache keys on it."""

from __future__ import annotations

import json
import logging

import torch

from contrastive_rlvr.run.command import load_run_inputs
from contrastive_rlvr.run.folder import SFT_DIR
from contrastive_rlvr.trainer.parse import parse_config


def _settings(out):
    return json.loads((out / SFT_DIR / "embedded_settings.json").read_text())


def test_context_frac_reaches_the_saved_warm_start(tmp_path, caplog):
    torch.set_num_threads(1)
    args = ["--embedded_sft_steps", "2", "--embedded_sft_context_frac", "0.5"]
    load_run_inputs(parse_config(None, [*args, "--output_dir", str(tmp_path)]), tmp_path)
    record = _settings(tmp_path)
    assert record["sft"]["context_frac"] == 0.5 and record["sft_steps_run"] == 2
    # The default: the plain warm start.
    plain = tmp_path / "plain"
    load_run_inputs(parse_config(None, ["--embedded_sft_steps", "2"]), plain)
    assert _settings(plain)["sft"]["context_frac"] == 0.0
    # Reusing a warm start built with another share says so.
    with caplog.at_level(logging.WARNING, logger="contrastive_rlvr.embedded.warm_start_rules"):
        load_run_inputs(parse_config(None, ["--embedded_sft_steps", "2"]), tmp_path)
    assert "embedded_sft_context_frac: 0.5 there, 0.0 here" in caplog.text


def test_compare_shares_a_warm_start_only_with_the_same_context_frac(tmp_path):
    from contrastive_rlvr.compare import _sft_key, make_spec

    plain = make_spec(None, output_dir=tmp_path / "a")
    reading = make_spec(None, output_dir=tmp_path / "b",
                        overrides=["--embedded_sft_context_frac", "0.25"])  # fmt: skip
    assert _sft_key(plain, 0)["embedded_sft_context_frac"] == 0.0
    assert _sft_key(reading, 0)["embedded_sft_context_frac"] == 0.25
    assert _sft_key(plain, 0) != _sft_key(reading, 0)


def test_reading_warm_start_takes_the_runs_bicc_budget(tmp_path):
    from contrastive_rlvr.compare import _sft_key, make_spec
    from contrastive_rlvr.run.embedded_inputs import sft_context_budget

    torch.set_num_threads(1)
    # The shipped embedded.yaml: floor(0.4 x bicc_max_seq_len 256) = 102 tokens of attempts,
    # the framing on top (bicc_framing_budget 'outside'); the whole context is capped at 256
    # positions - 7 prompt tokens - 16 completion tokens = 233.
    outside = {"context_framing": "outside", "context_room": 233}
    got = sft_context_budget(parse_config(None, []))
    assert got == {"context_budget": 102, **outside}
    # Another share: floor(0.3 x 256) = 76; framing inside: floor(0.95 x 256) = 243 -> 233.
    config = parse_config(None, ["--bicc_context_ratio", "0.3"])
    assert sft_context_budget(config) == {"context_budget": 76, **outside}
    config = parse_config(None, ["--bicc_context_ratio", "0.95", "--bicc_framing_budget", "inside"])
    inside = {"context_budget": 233, "context_framing": "inside", "context_room": None}
    assert sft_context_budget(config) == inside
    args = ["--embedded_sft_steps", "2", "--embedded_sft_context_frac", "0.5",
            "--embedded_sft_context_target", "reference", "--num_generations", "4",
            "--embedded_sft_context_attempts", "sampled",
            "--embedded_bicc_phrases", "true", "--bicc_placement", "before_prompt"]  # fmt: skip
    load_run_inputs(parse_config(None, [*args, "--output_dir", str(tmp_path)]), tmp_path)
    record = _settings(tmp_path)
    assert record["bicc_phrases"] is True
    # The saved tokenizer has the framing as one token a piece.
    from contrastive_rlvr.embedded import load_char_tokenizer

    tok = load_char_tokenizer(tmp_path / SFT_DIR)
    header = tok("\nIncorrect attempts at this problem:\n", add_special_tokens=False)["input_ids"]
    assert len(header) == 1
    sft = record["sft"]
    assert sft["context_attempts"] == "sampled" and sft["context_max_new_tokens"] == 16
    assert sft["context_placement"] == "before_prompt"
    assert sft["context_target"] == "reference" and sft["context_budget"] == 102
    assert sft["context_max_attempts"] == 3 and sft["context_truncation"] == "middle"
    avoid = make_spec(None, output_dir=tmp_path / "a",
                      overrides=["--embedded_sft_context_frac", "0.5"])  # fmt: skip
    ref = make_spec(None, output_dir=tmp_path / "b", overrides=args[2:])
    assert _sft_key(avoid, 0)["embedded_sft_context_target"] == "avoid"
    assert _sft_key(avoid, 0) != _sft_key(ref, 0)


def test_reading_options_without_a_reading_share_are_refused():
    import pytest

    with pytest.raises(ValueError, match="embedded_sft_context_frac=0.0 is invalid: must be > 0"):
        parse_config(None, ["--embedded_sft_context_target", "reference"])
    with pytest.raises(ValueError, match="embedded_sft_context_frac"):
        parse_config(None, ["--embedded_sft_context_attempts", "sampled"])
