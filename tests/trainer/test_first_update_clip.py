"""``bicc/first_update_clip_frac``: the clip fraction of a BiCC run's first update, logged
once, from the project's loss and from TRL's (both log ``clip_ratio/region_mean``)."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from contrastive_rlvr.run.command import load_run_inputs, train
from contrastive_rlvr.run.folder import SFT_DIR
from contrastive_rlvr.trainer.callbacks import FIRST_UPDATE_CLIP_KEY, FirstUpdateClipFraction
from contrastive_rlvr.trainer.parse import parse_config

KEY = FIRST_UPDATE_CLIP_KEY


def _step_end(buffer: dict, step: int) -> dict:
    callback = FirstUpdateClipFraction(lambda: buffer)
    callback.on_step_end(None, SimpleNamespace(global_step=step), None)
    return buffer


def test_first_step_mean_of_the_micro_batch_fractions_of_either_route():
    # two micro-batches at 0.1 and 0.3 -> 0.2
    two = {"clip_ratio/region_mean": [0.1, 0.3]}
    assert _step_end(defaultdict(list, two), 1)[KEY] == [pytest.approx(0.2)]
    # TRL's loss: 0.625 and 0.375 (a NaN micro-batch, no completion tokens, is left out)
    trl = {"clip_ratio/region_mean": [0.625, float("nan"), 0.375], "clip_ratio/low_mean": [1.0]}
    assert _step_end(defaultdict(list, trl), 1)[KEY] == [pytest.approx(0.5)]
    # a later step (a resumed run), or a loss without clipping (ConSPO): nothing added
    assert KEY not in _step_end(defaultdict(list, {"clip_ratio/region_mean": [0.4]}), 2)
    assert KEY not in _step_end(defaultdict(list, {"conspo/loss": [0.4]}), 1)


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("warm")
    load_run_inputs(
        parse_config(None, ["--embedded_sft_steps", "60", "--output_dir", str(out)]), out
    )
    return out / SFT_DIR


def _run(tmp_path: Path, warm_start: Path, *flags: str) -> list[dict]:
    out = tmp_path / "run"
    shutil.copytree(warm_start, out / SFT_DIR)
    args = [
        "--max_steps", "2", "--eval_n", "1", "--eval_limit", "4", "--save_strategy", "no",
        "--diagnostics_every", "0", "--deltas_every", "0", "--output_dir", str(out), *flags,
    ]  # fmt: skip
    train(parse_config(None, args), progress=False)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_project_loss_route_logs_its_clip_frac_of_step_one_only(tmp_path, warm_start):
    # bicc_mix 0.5 (the paper's form, half the loss on the plain prompts): the project's
    # mixed loss, paper ratio mode,
    # logged under TRL's name (one key per quantity whichever loss computed it)
    lines = _run(tmp_path, warm_start, "--bicc_mix", "0.5", "--bicc_ratio_mode", "paper")
    assert "clip/frac" not in lines[0] and "loss/policy" in lines[0]
    assert lines[0][KEY] == pytest.approx(lines[0]["clip_ratio/region_mean"])
    assert lines[0][KEY] > 0  # paper mode: pi(o|[q;O]) / pi_old(o|q) != 1 on-policy
    assert KEY not in lines[1]


def test_trl_loss_route_logs_trls_region_clip_ratio(tmp_path, warm_start):
    # bicc_mix 1 with grpo: TRL's _compute_loss on the conditioned prompt ids
    lines = _run(tmp_path, warm_start, "--bicc_mix", "1.0", "--bicc_ratio_mode", "paper")
    assert "clip/frac" not in lines[0] and "loss/policy" not in lines[0]
    assert lines[0][KEY] == pytest.approx(lines[0]["clip_ratio/region_mean"])
    assert lines[0][KEY] > 0
    assert KEY not in lines[1]


def test_consistent_mode_clips_nothing_on_the_first_update(tmp_path, warm_start):
    # consistent: pi_theta(o|[q;O]) / pi_old(o|[q;O]) is exactly 1 before the first update
    lines = _run(tmp_path, warm_start, "--bicc_mix", "1.0", "--bicc_ratio_mode", "consistent")
    assert lines[0][KEY] == 0.0
