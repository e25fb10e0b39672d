"""report.html says what the terminal said: a run that learned nothing (and the causes
found), a BiCC arm where BiCC never applied (``bicc/conditioned_frac`` 0 at every
step), and what a BiCC arm's clip share measures where one appears. Run folders are
written by hand, with the numbers each sentence must quote."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import yaml

from contrastive_rlvr.html_report import BICC_CLIP_NOTE, write_report

NOTHING = (
    "the rewards never told completions apart: every group's rewards were equal at every "
    "one of the 2 logged steps"
)


def _run(folder: Path, *, bicc: bool, seed: int, steps: list[dict], nothing: str | None = None):
    folder.mkdir(parents=True)
    config = {"recipe": "grpo", "bicc": bicc, "rcc": False, "seed": seed}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    summary = {
        "recipe": "grpo", "bicc": bicc, "rcc": False, "seed": seed, "steps": len(steps),
        "heldout_avg@n_before": 0.5, "heldout_avg@n_after": 0.5, "eval_n": 4,
        "learning_signal": {
            "causes": {"collapsed": "most groups had all rewards equal"} if nothing else {},
            "learned_nothing": nothing,
        },
    }  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))


def _text(path: Path) -> str:
    body = re.sub(r"<[^>]+>", " ", path.read_text())
    return " ".join(html.unescape(body).split())


def _steps(conditioned: float, collapse: float, clip: float) -> list[dict]:
    return [
        {"step": k, "reward": 0.5, "bicc/conditioned_frac": conditioned,
         "adv/collapse_rate": collapse, "clip_ratio/region_mean": clip}
        for k in (1, 2)
    ]  # fmt: skip


def test_a_run_that_learned_nothing_says_so_with_its_causes(tmp_path):
    run = tmp_path / "run"
    _run(run, bicc=False, seed=0, steps=_steps(0.0, 1.0, 0.0), nothing=NOTHING)
    text = _text(write_report(run))
    assert f"The run learned nothing : {NOTHING}." in text
    assert "Why the run may have learned nothing: collapsed: most groups had all rewards" in text


def test_bicc_never_applied_and_the_bicc_clip_share_are_explained(tmp_path):
    out = tmp_path / "compare"
    _run(out / "grpo" / "bicc" / "seed0", bicc=True, seed=0, steps=_steps(0.0, 1.0, 0.0),
         nothing=NOTHING)  # fmt: skip
    _run(out / "grpo" / "bicc" / "seed1", bicc=True, seed=1, steps=_steps(0.5, 0.25, 0.33))
    _run(out / "grpo" / "plain" / "seed1", bicc=False, seed=1, steps=_steps(0.0, 0.25, 0.0))
    text = _text(write_report(out))
    assert (
        "grpo/bicc/seed0: BiCC never applied: bicc/conditioned_frac was 0 at every logged "
        "step" in text
    )
    assert "all right or all wrong lacks (adv/collapse_rate 1.00)." in text
    assert f"grpo/bicc/seed0 learned nothing: {NOTHING}." in text
    # seed 1 conditioned half its rows: not named; the plain arm is never named
    assert "grpo/bicc/seed1: BiCC never applied" not in text
    assert "grpo/plain/seed1: BiCC" not in text
    assert " ".join(BICC_CLIP_NOTE.split()) in text


def test_no_clip_note_when_no_bicc_arm_clipped(tmp_path):
    out = tmp_path / "compare"
    _run(out / "grpo" / "bicc" / "seed0", bicc=True, seed=0, steps=_steps(0.5, 0.25, 0.0))
    _run(out / "grpo" / "plain" / "seed0", bicc=False, seed=0, steps=_steps(0.0, 0.25, 0.2))
    text = _text(write_report(out))
    assert "A BiCC arm's clip share" not in text and "never applied" not in text
