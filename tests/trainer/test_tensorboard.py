"""``--report_to tensorboard``: a tiny run writes event files whose scalars are the
values the trainer logged (read back with TensorBoard's own reader)."""

from __future__ import annotations

import json

import pytest
from trainer_utils import make_config, make_trainer, save_tiny_model

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="tensorboard not installed (a project dependency)",
)


def test_tensorboard_event_files_hold_the_logged_metrics(tmp_path):
    model_dir = save_tiny_model(tmp_path / "tiny")
    config = make_config(tmp_path, rcc=True, bicc=True, report_to="tensorboard")
    logdir = tmp_path / "out"  # transformers writes under output_dir/runs/<time_host>/
    trainer = make_trainer(model_dir, config)
    trainer.train()
    files = list(logdir.rglob("events.out.tfevents.*"))
    assert files, f"no event file under {logdir}"
    acc = event_accumulator.EventAccumulator(str(files[0].parent))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("train/reward", "train/loss", "train/bicc/context_tokens", "train/rcc/cov"):
        assert tag in tags, f"{tag} not in {sorted(tags)}"
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2  # max_steps=2, logging_steps=1
    events = acc.Scalars("train/reward")
    assert [e.step for e in events] == [h["step"] for h in logged]
    for e, h in zip(events, logged, strict=True):
        assert e.value == pytest.approx(h["reward"], abs=1e-6)
    # A hand-built RLVRTrainer writes metrics.jsonl itself (its callbacks are attached by
    # the trainer), and every metric there reaches TensorBoard, the running counters too.
    rows = [json.loads(x) for x in (logdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[-1]["guard/rolled_back_total"] == 0.0
    missing = sorted(k for k in rows[0] if k != "step" and f"train/{k}" not in tags)
    assert not missing, missing
    assert acc.Scalars("train/guard/rolled_back_total")[-1].value == 0.0
