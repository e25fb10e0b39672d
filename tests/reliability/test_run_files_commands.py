"""Every command that writes or reads a run's folder goes through ``run_files``: one fault
made to happen per command (a benchmark name that climbs out, the user's own file, a
planted link, a live writer, the umask, a FIFO, /dev/zero), each one ``error:`` line
before any model loads where the fault can be seen then."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cli_utils import cli, one_line
from trainer_utils import _tiny_run_args, forbid_model_loading, save_tiny_model

from contrastive_rlvr.run_files import claim

#: Another process holding a folder's lock, as a live ``train`` does (OutputDirLock's flock).
HOLDER = """
import fcntl, os, sys, time
os.makedirs(sys.argv[1], exist_ok=True)
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("held", flush=True)
time.sleep(60)
"""


@pytest.fixture
def live_writer():
    """``live_writer(folder)``: a process that holds ``folder``'s lock until the test ends."""
    procs = []

    def hold(folder: Path) -> None:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


def _benchmark(tmp_path: Path) -> Path:
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps({"problem": "1+1=", "answer": "2"}) + "\n")
    return path


# ---------------------------------------------------------------------------------- eval


def test_eval_benchmark_name_climbing_out_of_the_folder_is_refused(tmp_path, monkeypatch):
    forbid_model_loading(monkeypatch, "the name is refused before any model loads")
    bench = _benchmark(tmp_path)
    out = tmp_path / "a" / "b" / "c" / "out"
    result = cli(["eval", "--model", str(tmp_path / "m"), "--benchmarks",
                  f"../../../X={bench}", "--output_dir", str(out)])  # fmt: skip
    one_line(result, 2, "is not a plain name")
    assert not list(tmp_path.rglob("X*.jsonl")) and not out.exists()


def test_eval_n_of_a_billion_is_refused_up_front(tmp_path):
    result = cli(["eval", "--model", "m", "--n", "1000000000", "--output_dir", str(tmp_path)])
    one_line(result, 2, "n=1000000000 is invalid: samples per problem must be in 1..")


def test_eval_into_a_folder_a_live_run_holds_is_refused_before_the_model(
    tmp_path, monkeypatch, live_writer
):
    forbid_model_loading(monkeypatch, "a folder in use is refused before the model loads")
    model, out = save_tiny_model(tmp_path / "model"), tmp_path / "out"
    live_writer(out)
    result = cli(["eval", "--model", str(model), "--benchmarks", str(_benchmark(tmp_path)),
                  "--output_dir", str(out)])  # fmt: skip
    one_line(result, 2, "is in use by another run or evaluation")
    assert list(out.iterdir()) == []


def test_eval_results_json_that_is_a_fifo_is_one_line_not_a_hang(tmp_path, monkeypatch):
    forbid_model_loading(monkeypatch, "refused before the model loads")
    model, out = save_tiny_model(tmp_path / "model"), tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "results.json")
    started = time.monotonic()
    result = cli(["eval", "--model", str(model), "--benchmarks", str(_benchmark(tmp_path)),
                  "--output_dir", str(out)])  # fmt: skip
    one_line(result, 2, "results.json is a pipe (FIFO), not a regular file")
    assert time.monotonic() - started < 30


# ------------------------------------------------------------------------------- premise


def _premise(out: Path) -> list[str]:
    return ["premise", "--output_dir", str(out), "--problems", "2"]


def test_premise_never_replaces_the_users_samples(tmp_path, monkeypatch):
    forbid_model_loading(monkeypatch, "the user's file is refused before any model loads")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "samples.jsonl").write_text("my samples\n")
    one_line(cli(_premise(out)), 2, "samples.jsonl exists and no run of this project wrote it")
    assert (out / "samples.jsonl").read_text() == "my samples\n"


def test_premise_never_writes_through_a_planted_link(tmp_path, monkeypatch):
    forbid_model_loading(monkeypatch, "the link is refused before any model loads")
    out, victim = tmp_path / "shared", tmp_path / "victim.txt"
    out.mkdir()
    victim.write_text("the user's\n")
    (out / "premise.txt").symlink_to(victim)
    one_line(cli(_premise(out)), 2, "premise.txt is a symbolic link")
    assert victim.read_text() == "the user's\n"


def test_premise_into_a_folder_a_live_run_holds_is_refused(tmp_path, monkeypatch, live_writer):
    forbid_model_loading(monkeypatch, "a folder in use is refused before the model loads")
    out = tmp_path / "run"
    live_writer(out)
    one_line(cli(_premise(out)), 2, "is in use by another run")


# --------------------------------------------------------------------------------- train


def test_overwrite_output_dir_never_deletes_the_model_trained_from(tmp_path, monkeypatch):
    forbid_model_loading(monkeypatch, "refused before any model loads")
    args = _tiny_run_args(tmp_path)
    out = tmp_path / "out"
    checkpoint = save_tiny_model(out / "checkpoint-3")
    (checkpoint / "trainer_state.json").write_text('{"global_step": 3}')
    args[args.index("--model") + 1] = str(checkpoint)
    result = cli(["train", *args, "--overwrite_output_dir", "true"])
    one_line(result, 2, "is inside output_dir")
    assert (checkpoint / "config.json").is_file() and (checkpoint / "model.safetensors").is_file()


def test_train_metrics_log_planted_as_a_link_is_refused(tmp_path):
    from contrastive_rlvr.errors import UserError
    from contrastive_rlvr.trainer.callbacks import MetricsJsonl

    victim = tmp_path / "victim.txt"
    victim.write_text("the user's\n")
    (tmp_path / "metrics.jsonl").symlink_to(victim)
    args = type("A", (), {"should_save": True})()
    state = type("S", (), {"global_step": 1, "is_world_process_zero": True})()
    with pytest.raises(UserError, match="metrics.jsonl is a symbolic link"):
        MetricsJsonl(tmp_path).on_log(args, state, None, logs={"reward": 0.5})
    assert victim.read_text() == "the user's\n"


# ------------------------------------------------------------------------------- compare


def test_compare_out_naming_a_file_is_one_line(tmp_path):
    (tmp_path / "results").write_text("a file\n")
    result = cli(["compare", "--out", str(tmp_path / "results"), "--recipes", "grpo",
                  "--arms", "plain", "--seeds", "0"])  # fmt: skip
    one_line(result, 2, "is a file")
    assert (tmp_path / "results").read_text() == "a file\n"


def test_compare_negative_seed_is_refused_up_front(tmp_path):
    result = cli(["compare", "--out", str(tmp_path / "o"), "--seeds", "-1", "--recipes", "grpo"])
    one_line(result, 2, "seeds: -1 is invalid")
    assert not (tmp_path / "o").exists()


def test_compare_reads_a_fifo_summary_as_unfinished_without_waiting(tmp_path):
    from contrastive_rlvr.compare.spec import finished_summary

    os.mkfifo(tmp_path / "summary.json")
    started = time.monotonic()
    assert finished_summary(tmp_path) is None
    assert time.monotonic() - started < 2


# ------------------------------------------------------------------------- plot, report


def _run_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump({"recipe": "grpo", "bicc": False,
                                                       "rcc": False}))  # fmt: skip
    rows = [{"step": s, "reward": 0.1 * s, "reward/accuracy": 0.1 * s} for s in range(1, 4)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_plot_and_report_files_are_readable_as_the_umask_says(tmp_path):
    run = _run_folder(tmp_path / "run")
    old = os.umask(0o022)
    try:
        assert cli(["plot", str(run)]).exit_code == 0
        assert cli(["report", str(run)]).exit_code == 0
    finally:
        os.umask(old)
    figures = list((run / "figures").glob("*.png"))
    assert figures
    for path in [run / "report.html", *figures]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_report_never_replaces_a_page_no_run_wrote(tmp_path):
    run = _run_folder(tmp_path / "run")
    (run / "report.html").write_text("my page\n")
    one_line(cli(["report", str(run)]), 2, "report.html exists and no run of this project")
    assert (run / "report.html").read_text() == "my page\n"


def test_plot_of_metrics_linked_to_dev_zero_is_one_line(tmp_path):
    run = _run_folder(tmp_path / "run")
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to("/dev/zero")
    one_line(cli(["plot", str(run)]), 2, "metrics.jsonl is a device, not a regular file")


def test_report_of_a_fifo_summary_is_one_line_not_a_hang(tmp_path):
    run = _run_folder(tmp_path / "run")
    os.mkfifo(run / "summary.json")
    started = time.monotonic()
    one_line(cli(["report", str(run)]), 2, "summary.json is a pipe (FIFO)")
    assert time.monotonic() - started < 30


def test_a_report_of_a_live_run_drops_its_torn_last_line(tmp_path):
    run = _run_folder(tmp_path / "run")
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "rew')  # the writer is mid-line
    claim(run / "metrics.jsonl")
    assert cli(["plot", str(run)]).exit_code == 0


# ------------------------------------------------------------------ item 7: smaller ones


def test_a_model_folder_without_tokenizer_files_is_named(tmp_path, monkeypatch):
    forbid_model_loading(monkeypatch, "refused before the model loads")
    model = save_tiny_model(tmp_path / "m")
    for path in model.iterdir():
        if "token" in path.name or path.name in ("vocab.json", "special_tokens_map.json"):
            path.unlink()
    one_line(cli(["eval", "--model", str(model), "--output_dir", str(tmp_path / "e")]), 2,
             f"the folder '{model}' holds no tokenizer files")  # fmt: skip


def test_malformed_model_init_kwargs_json_names_the_field(tmp_path):
    result = cli(["train", "--model_init_kwargs", '{"dtype": ', "--output_dir", str(tmp_path)])
    one_line(result, 2, "--model_init_kwargs is not valid JSON")


def test_plot_of_a_run_with_an_empty_metrics_log_says_so(tmp_path):
    run = _run_folder(tmp_path / "run")
    (run / "metrics.jsonl").write_text("")
    one_line(cli(["plot", str(run)]), 2, "nothing to plot")


def test_a_non_number_in_metrics_names_the_file_row_and_key(tmp_path):
    run = _run_folder(tmp_path / "run")
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 4, "reward": "high"}) + "\n")
    one_line(cli(["plot", str(run)]), 2, "metrics.jsonl row 4: reward='high' is not a number")


def test_a_truncated_summary_names_the_file(tmp_path):
    run = _run_folder(tmp_path / "run")
    (run / "summary.json").write_text('{"heldout_avg@n_before": 0.5, "heldout_av')
    one_line(cli(["report", str(run)]), 2, "summary.json is not JSON (it ends early")
