"""``compare``: the matrix runs, skips finished runs, records failures; the table's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from contrastive_rlvr import compare as cmp
from contrastive_rlvr.cli import app
from contrastive_rlvr.plots import plot_runs

TINY = [
    "--max_steps", "2", "--embedded_sft_steps", "20", "--eval_n", "1", "--eval_limit", "4",
    "--save_strategy", "no", "--diagnostics_every", "1", "--deltas_every", "1",
]  # fmt: skip


@pytest.fixture(scope="module")
def real_matrix(tmp_path_factory) -> Path:
    """A real 2 recipes x 2 arms x 1 seed matrix of the embedded default, two steps each."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("compare") / "out"
    args = ["compare", "--out", str(out), "--recipes", "grpo,dr_grpo", "--arms", "plain,bicc+rcc"]
    result = CliRunner().invoke(app, [*args, "--seeds", "0", *TINY])
    assert result.exit_code == 0, result.output
    return out


def test_real_matrix_writes_runs_table_and_json(real_matrix):
    out = real_matrix
    for recipe in ("grpo", "dr_grpo"):
        for arm in ("plain", "bicc+rcc"):
            run = out / recipe / arm / "seed0"
            summary = json.loads((run / "summary.json").read_text())
            assert (summary["recipe"], summary["steps"]) == (recipe, 2)
            assert (summary["bicc"], summary["rcc"]) == (arm == "bicc+rcc",) * 2
            # the shared warm start was copied in, not rebuilt
            assert (run / "sft-model" / "config.json").exists()
            assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    assert (out / "sft-cache" / "seed0" / "sft-model" / "config.json").exists()
    report = json.loads((out / "results.json").read_text())
    labels = [row["label"] for row in report["rows"]]
    assert labels == ["GRPO", "GRPO + BiCC + RCC", "Dr.GRPO", "Dr.GRPO + BiCC + RCC"]
    assert report["failed"] == [] and report["pending"] == 0
    for row in report["rows"]:
        assert row["seeds"] == [0]
        summary = json.loads(
            (out / row["recipe"] / row["arm"] / "seed0" / "summary.json").read_text()
        )
        assert row["after"]["mean"] == summary["heldout_avg@n_after"]
        # the RCC arms' gradient variance, from the runs' own diag lines (both steps)
        assert ("grad_var_ratio" in row) == (row["arm"] == "bicc+rcc")
        if row["arm"] == "bicc+rcc":
            lines = (out / row["recipe"] / row["arm"] / "seed0" / "metrics.jsonl").read_text()
            steps = [json.loads(line) for line in lines.splitlines()]
            plain = sum(s["diag/grad_var_plain"] for s in steps)
            if plain == 0:  # every group of both steps collapsed: no ratio
                assert row["grad_var_ratio"] is None
                continue
            ratio = sum(s["diag/grad_var_rcc"] for s in steps) / plain
            assert row["grad_var_ratio"]["mean"] == pytest.approx(ratio)
            assert row["per_seed"]["0"]["grad_var"]["steps"] == 2
    table = (out / "results.md").read_text()
    assert "| Dr.GRPO + BiCC + RCC |" in table and "held-out avg@1" in table
    assert "gradient variance RCC / plain (ratio of means)" in table


def test_second_invocation_skips_finished_runs(real_matrix):
    summaries = sorted(real_matrix.rglob("seed0/summary.json"))
    stamps = [p.stat().st_mtime_ns for p in summaries]
    spec = cmp.make_spec(
        recipes="grpo,dr_grpo", arms="plain,bicc+rcc", seeds="0",
        output_dir=real_matrix, overrides=TINY,
    )  # fmt: skip
    lines: list[str] = []
    cmp.run_compare(spec, echo=lines.append)
    assert lines == []  # nothing ran, nothing failed
    assert [p.stat().st_mtime_ns for p in summaries] == stamps


def test_plot_writes_png_files_for_a_compare_folder(real_matrix, tmp_path):
    paths = plot_runs([real_matrix], tmp_path / "figs")
    names = {p.name for p in paths}
    for kind in ("curves", "cov", "deltas", "gradvar"):
        assert {f"{kind}_grpo.png", f"{kind}_dr_grpo.png"} <= names
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


# ---------------------------------------------------------------------- fake runs (no training)

#: held-out avg@n after RL per (recipe, arm, seed); before RL is 0.5 everywhere.
AFTER = {
    ("grpo", "plain", 0): 0.70, ("grpo", "plain", 1): 0.80, ("grpo", "plain", 2): 0.75,
    ("grpo", "rcc", 0): 0.74, ("grpo", "rcc", 1): 0.82, ("grpo", "rcc", 2): 0.80,
    ("grpo", "bicc", 0): 0.60, ("grpo", "bicc", 1): 0.60,  # seed 2 fails
}  # fmt: skip


@pytest.fixture
def fake_training(monkeypatch):
    """Replace the warm start and train() by stand-ins that write what compare reads."""
    import contrastive_rlvr.run.command as run_module

    calls: list[tuple] = []

    def fake_inputs(cfg, directory):
        (Path(directory) / "sft-model").mkdir(parents=True, exist_ok=True)
        (Path(directory) / "sft-model" / "config.json").write_text("{}")

    def fake_train(cfg, progress=True):
        arm = {(False, False): "plain", (True, False): "bicc", (False, True): "rcc"}[
            (cfg.bicc, cfg.rcc)
        ]
        calls.append((cfg.recipe, arm, cfg.seed))
        assert (Path(cfg.output_dir) / "sft-model" / "config.json").exists()
        key = (cfg.recipe, arm, cfg.seed)
        if key not in AFTER:
            raise RuntimeError(f"boom in {key}")
        summary = {"heldout_avg@n_before": 0.5, "heldout_avg@n_after": AFTER[key], "eval_n": 4}
        (Path(cfg.output_dir) / "summary.json").write_text(json.dumps(summary))

    monkeypatch.setattr(run_module, "load_run_inputs", fake_inputs)
    monkeypatch.setattr(run_module, "train", fake_train)
    return calls


def test_table_numbers_by_hand_and_failures_reported(tmp_path, fake_training):
    spec = cmp.make_spec(
        recipes="grpo", arms="plain,bicc,rcc", seeds="0,1,2", output_dir=tmp_path / "out"
    )
    lines: list[str] = []
    report = cmp.run_compare(spec, echo=lines.append)
    assert len(fake_training) == 9
    assert "model: embedded" in (tmp_path / "out" / "base-config.yaml").read_text()
    assert report["spec"]["config"] == str(tmp_path / "out" / "base-config.yaml")
    rows = {row["arm"]: row for row in report["rows"]}
    # plain: 0.70, 0.80, 0.75 -> mean 0.75, s = 0.05, half-width = t_{0.975,2} * s / sqrt(3)
    # = 4.302653 * 0.05 / 1.7320508 = 0.124207
    assert rows["plain"]["after"]["mean"] == pytest.approx(0.75)
    assert rows["plain"]["after"]["ci_half_width"] == pytest.approx(0.124207, abs=1e-6)
    # rcc - plain by seed: 0.04, 0.02, 0.05 -> mean 0.036667, s = 0.0152753,
    # half-width = 4.302653 * 0.0152753 / 1.7320508 = 0.037946
    diff = rows["rcc"]["diff_vs_plain"]
    assert diff["mean"] == pytest.approx(0.036667, abs=1e-6)
    assert diff["ci_half_width"] == pytest.approx(0.037946, abs=1e-6)
    # bicc: seeds 0, 1 only (seed 2 failed): differences -0.10, -0.20 -> mean -0.15,
    # s = sqrt((0.05^2 + 0.05^2) / 1) = 0.0707107, half-width = t_{0.975,1} * s / sqrt(2)
    # = 12.706205 * 0.0707107 / 1.4142136 = 0.635310
    diff = rows["bicc"]["diff_vs_plain"]
    assert rows["bicc"]["seeds"] == [0, 1]
    assert diff["mean"] == pytest.approx(-0.15)
    assert diff["ci_half_width"] == pytest.approx(0.635310, abs=1e-6)
    assert rows["plain"]["before"]["mean"] == 0.5 and rows["plain"]["before"]["ci_half_width"] == 0
    table = (tmp_path / "out" / "results.md").read_text()
    assert "| GRPO | 75.0 ± 12.4 | — | 50.0 ± 0.0 | 3 |" in table
    # rcc after: (0.74 + 0.82 + 0.80) / 3 = 0.786667 -> "78.7"; deviations -0.046667, 0.033333,
    # 0.013333 -> s = sqrt(0.0034667 / 2) = 0.0416333, half-width = 4.302653 * 0.0416333 /
    # 1.7320508 = 0.103424 -> "10.3"
    assert "| GRPO + RCC | 78.7 ± 10.3 | +3.7 ± 3.8 | 50.0 ± 0.0 | 3 |" in table
    assert "| GRPO + BiCC | 60.0 ± 0.0 | -15.0 ± 63.5 | 50.0 ± 0.0 | 2 |" in table
    assert "GRPO + RCC: not distinguishable from the plain arm" in table
    # the BiCC arm's form, as its runs resolved it (the default: distill at weight 0.1)
    assert rows["bicc"]["bicc_form"] == (
        "bicc_form distill: weight 0.1, rows wrong, teacher sampling"
    )
    assert rows["plain"]["bicc_form"] is None and rows["rcc"]["bicc_form"] is None
    assert "- GRPO + BiCC: bicc_form distill: weight 0.1, rows wrong, teacher sampling" in table
    # the failure is recorded with its message; the other runs went on
    assert report["failed"] == [
        {"recipe": "grpo", "arm": "bicc", "seed": 2,
         "error_file": str(tmp_path / "out" / "grpo" / "bicc" / "seed2" / "error.txt")}
    ]  # fmt: skip
    assert "boom in ('grpo', 'bicc', 2)" in (tmp_path / "out/grpo/bicc/seed2/error.txt").read_text()
    assert any(line.startswith("FAILED grpo/bicc/seed2") for line in lines)
    assert "grpo/bicc/seed2" in table
    # second invocation: only the failed run is tried again
    fake_training.clear()
    cmp.run_compare(spec, echo=lines.append)
    assert fake_training == [("grpo", "bicc", 2)]


def test_the_table_names_the_bicc_form_the_overrides_chose(tmp_path, fake_training):
    spec = cmp.make_spec(
        recipes="grpo", arms="plain,bicc", seeds="0,1", output_dir=tmp_path / "out",
        overrides=["--bicc_mix", "0.5", "--bicc_ratio_mode", "consistent"],
    )  # fmt: skip
    report = cmp.run_compare(spec, echo=lambda line: None)
    table = (tmp_path / "out" / "results.md").read_text()
    words = "bicc_form conditioned: bicc_mix 0.5, ratio consistent"
    assert [row["bicc_form"] for row in report["rows"]] == [None, words]
    assert f"- GRPO + BiCC: {words}" in table
    from contrastive_rlvr.html_report import write_report

    page = write_report(tmp_path / "out").read_text()
    assert f"BiCC's form in each BiCC arm: GRPO + BiCC: {words}." in page


def test_non_embedded_model_starts_from_paper_yaml_as_train_does(
    tmp_path, fake_training, monkeypatch
):
    # train --model X (X not embedded) starts from paper.yaml (lr 1e-6, cosine); compare
    # used to copy embedded.yaml (lr 1e-4, constant) whatever --model said.
    import yaml

    import contrastive_rlvr.run.command as run_module
    from contrastive_rlvr.configs import config_path

    seen = []
    inner = run_module.train  # fake_training's stand-in

    def record(cfg, progress=True):
        seen.append((cfg.model, cfg.learning_rate, cfg.lr_scheduler_type))
        return inner(cfg, progress=progress)

    monkeypatch.setattr(run_module, "train", record)
    spec = cmp.make_spec(
        recipes="grpo",
        arms="plain",
        seeds="0",
        output_dir=tmp_path / "out",
        overrides=["--model", "some-org/some-model"],
    )
    cmp.run_compare(spec, echo=lambda _line: None)
    copied = yaml.safe_load((tmp_path / "out" / "base-config.yaml").read_text())
    assert copied == yaml.safe_load(config_path("paper.yaml").read_text())
    assert seen == [("some-org/some-model", 1e-6, "cosine")]


def test_spec_from_yaml_then_flags(tmp_path):
    spec_file = tmp_path / "c.yaml"
    spec_file.write_text(
        "recipes: [grpo, gspo]\narms: [plain, rcc]\nseeds: [3]\njobs: 2\n"
        "overrides: {max_steps: 5, log_delta: true}\n"
    )
    spec = cmp.make_spec(spec_file, seeds="4,5", overrides=["--eval_n", "2"])
    assert spec.recipes == ["grpo", "gspo"] and spec.arms == ["plain", "rcc"]
    assert spec.seeds == [4, 5] and spec.jobs == 2
    assert spec.overrides == ["--max_steps", "5", "--log_delta", "true", "--eval_n", "2"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"arms": "plain,both"}, "unknown arm 'both'"),
        ({"recipes": "grpo,ppo"}, "unknown recipe 'ppo'"),
        ({"seeds": "0,0"}, "duplicates"),
        ({"seeds": "a"}, "integers expected"),
        ({"jobs": 0}, "jobs=0"),
        ({"overrides": ["--seed", "3"]}, "set by the matrix"),
        ({"overrides": ["--output-dir=x"]}, "set by the matrix"),
    ],
)
def test_bad_spec_raises(flags, message):
    with pytest.raises(ValueError, match=message):
        cmp.make_spec(**flags)


def test_bad_yaml_field_raises(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("recipe: grpo\n")
    with pytest.raises(ValueError, match=r"unknown field 'recipe' \(did you mean recipes\?\)"):
        cmp.make_spec(bad)


def test_invalid_run_config_fails_before_any_run(tmp_path):
    spec = cmp.make_spec(recipes="grpo", arms="plain", seeds="0", output_dir=tmp_path,
                         overrides=["--bicc_context_ratio", "1.5"])  # fmt: skip
    with pytest.raises(ValueError, match="run grpo/plain/seed0: bicc_context_ratio=1.5"):
        cmp.run_compare(spec)
    assert not (tmp_path / "grpo").exists()


def test_heldout_size_0_is_refused_before_any_run(tmp_path):
    spec = cmp.make_spec(recipes="grpo", arms="plain", seeds="0", output_dir=tmp_path,
                         overrides=["--model", "tiny-random", "--dataset", "d.jsonl",
                                    "--heldout_size", "0"])  # fmt: skip
    with pytest.raises(ValueError, match="heldout_size=0 turns the held-out scoring off"):
        cmp.run_compare(spec)
    assert not (tmp_path / "grpo").exists()


@pytest.mark.slow
def test_jobs_run_in_child_processes(tmp_path):
    # two runs at once, each `python -m contrastive_rlvr.compare train ...` in its own process
    spec = cmp.make_spec(recipes="grpo", arms="plain,rcc", seeds="0", jobs=2,
                         output_dir=tmp_path / "out", overrides=TINY)  # fmt: skip
    report = cmp.run_compare(spec, echo=lambda line: None)
    assert report["failed"] == []
    for arm in ("plain", "rcc"):
        summary = json.loads(
            (tmp_path / "out" / "grpo" / arm / "seed0" / "summary.json").read_text()
        )
        assert summary["rcc"] == (arm == "rcc") and summary["steps"] == 2


# ---------------------------------------------------------------------- Ctrl-C and early failures


@pytest.fixture
def interruptible(monkeypatch):
    """Stand-ins for the warm start and train(): train() of ``stop_at`` raises
    KeyboardInterrupt once (Ctrl-C in the middle of that run)."""
    import contrastive_rlvr.run.command as run_module

    state = {"calls": [], "stop_at": None}

    def fake_inputs(cfg, directory):
        (Path(directory) / "sft-model").mkdir(parents=True, exist_ok=True)
        (Path(directory) / "sft-model" / "config.json").write_text("{}")

    def fake_train(cfg, progress=True):
        key = (cfg.recipe, {(False, False): "plain", (False, True): "rcc"}[(cfg.bicc, cfg.rcc)])
        state["calls"].append(key)
        if key == state["stop_at"]:
            state["stop_at"] = None
            raise KeyboardInterrupt
        summary = {"heldout_avg@n_before": 0.5, "heldout_avg@n_after": 0.6, "eval_n": 4}
        (Path(cfg.output_dir) / "summary.json").write_text(json.dumps(summary))

    monkeypatch.setattr(run_module, "load_run_inputs", fake_inputs)
    monkeypatch.setattr(run_module, "train", fake_train)
    return state


def test_ctrl_c_marks_the_run_interrupted_and_a_rerun_resumes(tmp_path, interruptible):
    spec = cmp.make_spec(recipes="grpo,gmpo", arms="plain,rcc", seeds="0", output_dir=tmp_path)
    interruptible["stop_at"] = ("grpo", "rcc")
    lines: list[str] = []
    try:
        report = cmp.run_compare(spec, echo=lines.append)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped compare instead of being recorded")
    # stopped at once: the runs after the interrupted one did not start
    assert interruptible["calls"] == [("grpo", "plain"), ("grpo", "rcc")]
    assert report["interrupted"] == [{"recipe": "grpo", "arm": "rcc", "seed": 0}]
    assert report["failed"] == [] and report["pending"] == 2
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["interrupted"] == report["interrupted"]
    assert "Interrupted (run compare again to resume):" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "grpo" / "rcc" / "seed0" / "interrupted.txt").exists()
    assert "INTERRUPTED grpo/rcc/seed0" in lines
    # the rerun does the interrupted run and the ones never started, not the finished one
    interruptible["calls"].clear()
    report = cmp.run_compare(spec, echo=lines.append)
    assert interruptible["calls"] == [("grpo", "rcc"), ("gmpo", "plain"), ("gmpo", "rcc")]
    assert report["interrupted"] == [] and report["failed"] == [] and report["pending"] == 0
    assert not (tmp_path / "grpo" / "rcc" / "seed0" / "interrupted.txt").exists()


def test_a_run_whose_folder_cannot_be_made_is_recorded_and_the_others_go_on(
    tmp_path, interruptible
):
    spec = cmp.make_spec(recipes="grpo", arms="plain,rcc", seeds="0,1", output_dir=tmp_path)
    (tmp_path / "grpo").mkdir()
    (tmp_path / "grpo" / "plain").write_text("a file where the run folders go")
    report = cmp.run_compare(spec, echo=lambda line: None)
    assert sorted((f["arm"], f["seed"]) for f in report["failed"]) == [("plain", 0), ("plain", 1)]
    assert interruptible["calls"] == [("grpo", "rcc"), ("grpo", "rcc")]
    (row,) = [r for r in report["rows"] if r["arm"] == "rcc"]
    assert row["seeds"] == [0, 1]


CTRL_C_ARGS = [
    "--recipes", "grpo", "--arms", "plain,rcc", "--seeds", "0", "--max_steps", "40",
    "--embedded_sft_steps", "20", "--eval_n", "1", "--eval_limit", "2", "--save_steps", "2",
    "--diagnostics_every", "0", "--deltas_every", "0",
]  # fmt: skip


@pytest.mark.slow
def test_real_ctrl_c_stops_at_once_and_the_rerun_resumes(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "contrastive_rlvr.cli", "compare", "--out", str(out), *CTRL_C_ARGS]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    metrics = out / "grpo" / "plain" / "seed0" / "metrics.jsonl"
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 5):
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    # Waits for the exit, far longer than it needs (the run had 35 steps to go).
    output = proc.communicate(timeout=600)[0].decode()
    assert proc.returncode == 130, output[-3000:]
    steps_at_stop = len(metrics.read_text().splitlines())
    assert steps_at_stop < 40
    report = json.loads((out / "results.json").read_text())
    assert report["interrupted"] == [{"recipe": "grpo", "arm": "plain", "seed": 0}]
    assert not (out / "grpo" / "rcc" / "seed0" / "train.log").exists()  # never started
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    log = (out / "grpo" / "plain" / "seed0" / "train.log").read_text()
    assert "resume: from" in log
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == list(range(1, 41))
    report = json.loads((out / "results.json").read_text())
    assert report["interrupted"] == [] and report["failed"] == [] and report["pending"] == 0


@pytest.mark.slow
def test_real_ctrl_c_with_jobs_stops_the_children(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "contrastive_rlvr.cli", "compare", "--out", str(out)]
    cmd += [*CTRL_C_ARGS, "--jobs", "2"]
    # Its own session: the SIGINT goes to compare alone, which must pass it on.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    files = [out / "grpo" / arm / "seed0" / "metrics.jsonl" for arm in ("plain", "rcc")]
    while not all(f.exists() and len(f.read_text().splitlines()) >= 3 for f in files):
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=600)[0].decode()
    assert proc.returncode == 130, output[-3000:]
    assert all(len(f.read_text().splitlines()) < 40 for f in files)
    report = json.loads((out / "results.json").read_text())
    assert sorted(i["arm"] for i in report["interrupted"]) == ["plain", "rcc"]
    assert report["failed"] == []


# Hand-written diag lines per seed of the RCC arm: (grad_var_plain, grad_var_rcc) per logged
# step; None is a step that logged no gradient-variance diagnostic.
GRAD_VAR_STEPS = {
    0: [(1.0, 2.0), None, (3.0, 2.0)],
    1: [(2.0, 3.0), (2.0, 5.0), (0.0, 0.0)],  # the last step: every group collapsed
    2: [(4.0, 6.0)],
}


def test_rcc_gradient_variance_is_the_ratio_of_means_by_hand(tmp_path, monkeypatch):
    import contrastive_rlvr.run.command as run_module

    def fake_inputs(cfg, directory):
        (Path(directory) / "sft-model").mkdir(parents=True, exist_ok=True)
        (Path(directory) / "sft-model" / "config.json").write_text("{}")

    def fake_train(cfg, progress=True):
        out = Path(cfg.output_dir)
        summary = {"heldout_avg@n_before": 0.5, "heldout_avg@n_after": 0.7, "eval_n": 4}
        (out / "summary.json").write_text(json.dumps(summary))
        lines = []
        for step, pair in enumerate(GRAD_VAR_STEPS[cfg.seed], start=1):
            row = {"step": step, "reward": 0.5}
            if pair is not None:
                row["diag/grad_var_plain"], row["diag/grad_var_rcc"] = pair
            lines.append(json.dumps(row))
        (out / "metrics.jsonl").write_text("\n".join(lines) + "\n")

    monkeypatch.setattr(run_module, "load_run_inputs", fake_inputs)
    monkeypatch.setattr(run_module, "train", fake_train)
    spec = cmp.make_spec(recipes="grpo", arms="plain,rcc", seeds="0,1,2", output_dir=tmp_path)
    report = cmp.run_compare(spec, echo=lambda _: None)
    rows = {row["arm"]: row for row in report["rows"]}
    assert "grad_var_ratio" not in rows["plain"]  # not an RCC arm
    seeds = rows["rcc"]["per_seed"]
    # seed 0: (2 + 2) / (1 + 3) = 1.0; the mean of per-step ratios (2/1 + 2/3) / 2 = 1.3333
    # reads higher (Jensen: the mean of a ratio of noisy positive numbers)
    assert seeds["0"]["grad_var"]["ratio_of_means"] == pytest.approx(1.0)
    assert seeds["0"]["grad_var"]["mean_of_step_ratios"] == pytest.approx(4 / 3)
    assert seeds["0"]["grad_var"]["steps"] == 2
    # seed 1: (3 + 5 + 0) / (2 + 2 + 0) = 2.0 over 3 steps; mean plain 4/3, mean rcc 8/3
    assert seeds["1"]["grad_var"]["ratio_of_means"] == pytest.approx(2.0)
    assert seeds["1"]["grad_var"]["mean_grad_var_plain"] == pytest.approx(4 / 3)
    assert seeds["1"]["grad_var"]["mean_grad_var_rcc"] == pytest.approx(8 / 3)
    assert seeds["1"]["grad_var"]["steps"] == 3
    # seed 2: 6 / 4 = 1.5. Over seeds: 1.0, 2.0, 1.5 -> mean 1.5, s = 0.5,
    # half-width = t_{0.975,2} * 0.5 / sqrt(3) = 4.302653 * 0.5 / 1.7320508 = 1.242068
    assert seeds["2"]["grad_var"]["ratio_of_means"] == pytest.approx(1.5)
    ci = rows["rcc"]["grad_var_ratio"]
    assert ci["mean"] == pytest.approx(1.5)
    assert ci["ci_half_width"] == pytest.approx(1.242068, abs=1e-6)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["rows"][1]["grad_var_ratio"]["mean"] == pytest.approx(1.5)
    table = (tmp_path / "results.md").read_text()
    assert "| GRPO + RCC | 1.500 ± 1.242 | 1-3 | 3 |" in table
    assert "ratio of means" in table


def test_rcc_arm_without_gradient_variance_lines_reports_none(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "diag/grad_var_plain": 0.0, '
                       '"diag/grad_var_rcc": 0.0}\n')  # fmt: skip
    assert cmp.grad_var_summary(metrics) is None  # plain mean 0: no ratio
    assert cmp.grad_var_summary(tmp_path / "missing.jsonl") is None


# ---------------------------------------------------------------------- runs in compare's process

IN_PROCESS_ARGS = [
    "--recipes", "grpo", "--arms", "bicc", "--max_steps", "3", "--embedded_sft_steps", "200",
    "--eval_n", "1", "--eval_limit", "16", "--save_strategy", "no", "--torch_threads", "1",
    "--log_level", "info",
]  # fmt: skip


def test_in_process_runs_keep_their_own_output_and_numbers(tmp_path):
    """``jobs 1`` runs every run in ``compare``'s process, one after the other. Each run's
    log holds its own lines as a child process's would: the project's (not lost to the first
    run's closed log file) and transformers' (whose handler was made before the run, on the
    console), none of them on compare's console; and a run's numbers do not depend on the
    runs before it in the process (seed 1 after seed 0 = seed 1 alone)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}

    def compare(out: Path, seeds: str) -> str:
        cmd = [sys.executable, "-m", "contrastive_rlvr.cli", "compare", "--out", str(out),
               "--seeds", seeds, *IN_PROCESS_ARGS]  # fmt: skip
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout + done.stderr

    console = compare(tmp_path / "both", "0,1")
    assert "Running training" not in console and "contrastive_rlvr" not in console, console
    for seed in (0, 1):
        log = (tmp_path / "both" / "grpo" / "bicc" / f"seed{seed}" / "train.log").read_text()
        assert "Logging error" not in log, log[-3000:]
        assert "***** Running training *****" in log, log[-3000:]  # transformers, at info
        assert "INFO contrastive_rlvr.run.command: settings: " in log, log[-3000:]
    compare(tmp_path / "alone", "1")

    def numbers(out: Path) -> tuple:
        run = out / "grpo" / "bicc" / "seed1"
        steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        summary = json.loads((run / "summary.json").read_text())
        keys = ("loss", "reward", "grad_norm", "bicc/transfer_cos")
        return [[s.get(k) for k in keys] for s in steps], summary["heldout_avg@n_after"]

    after_seed0, alone = numbers(tmp_path / "both"), numbers(tmp_path / "alone")
    assert after_seed0 == alone
    assert any(step[1] > 0 for step in alone[0])  # rewarded completions: numbers that can differ
