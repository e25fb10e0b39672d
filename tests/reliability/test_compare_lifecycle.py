"""compare's processes and folders: children end with a killed parent, one compare per
folder, a live run's files are never opened, and old folders are not "other settings".

The runs are stand-ins (no training): in this process, a ``train`` that locks its folder
as the real one does; in child processes, tests/scripts/compare_fake_worker.py behind
the real :func:`~contrastive_rlvr.compare.child_main`."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from contrastive_rlvr import compare as cmp
from contrastive_rlvr.compare import launch as compare_launch
from contrastive_rlvr.errors import UserError
from contrastive_rlvr.run_files import write_file

FAKE_WORKER = Path(__file__).parents[1] / "scripts" / "compare_fake_worker.py"
#: Far longer than any of the waits below needs; only a broken case reaches it.
PATIENCE_S = 120


def _arm(cfg) -> str:
    return {(False, False): "plain", (True, False): "bicc", (False, True): "rcc",
            (True, True): "bicc+rcc"}[(cfg.bicc, cfg.rcc)]  # fmt: skip


@pytest.fixture
def locking_training(monkeypatch):
    """Stand-ins for the warm start and train(): train() holds its folder's lock as the
    real one does, writes config.yaml as the real one does, waits while ``hold`` is set,
    then writes a summary."""
    import contrastive_rlvr.run.command as run_module
    from contrastive_rlvr.run.folder import CONFIG_FILE, save_resolved_config
    from contrastive_rlvr.run.folder_lock import OutputDirLock

    state = {"calls": [], "hold": threading.Event(), "started": threading.Event()}
    state["go"] = threading.Event()

    def fake_inputs(cfg, directory):
        (Path(directory) / "sft-model").mkdir(parents=True, exist_ok=True)
        (Path(directory) / "sft-model" / "config.json").write_text("{}")

    def fake_train(cfg, progress=True):
        out = Path(cfg.output_dir)
        with OutputDirLock(out):
            state["calls"].append((cfg.recipe, _arm(cfg), cfg.seed))
            save_resolved_config(cfg, out / CONFIG_FILE)
            state["started"].set()
            if state["hold"].is_set():
                assert state["go"].wait(PATIENCE_S)
            summary = {"heldout_avg@n_before": 0.5, "heldout_avg@n_after": 0.6, "eval_n": 1}
            (out / "summary.json").write_text(json.dumps(summary))

    monkeypatch.setattr(run_module, "load_run_inputs", fake_inputs)
    monkeypatch.setattr(run_module, "train", fake_train)
    return state


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[0] not in ("Z", "X")


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")
def test_sigkill_of_compare_ends_its_children_and_the_rerun_finishes(tmp_path, locking_training):
    out = tmp_path / "out"
    release = tmp_path / "release"
    spec = cmp.make_spec(recipes="grpo", arms="plain,rcc", seeds="0", jobs=2, output_dir=out)
    parent = os.fork()
    if parent == 0:  # the compare process: its children are the stand-in workers
        code = 1
        try:
            os.environ["FAKE_RELEASE"] = str(release)
            compare_launch._child_command = lambda argv: [sys.executable, str(FAKE_WORKER), *argv]
            cmp.run_compare(spec, echo=lambda line: None)
            code = 0
        finally:
            os._exit(code)
    pid_files = [out / "grpo" / arm / "seed0" / "pid" for arm in ("plain", "rcc")]
    children: list[int] = []
    try:
        _wait_for(
            lambda: (
                all(p.exists() and p.read_text() for p in pid_files)
                or os.waitpid(parent, os.WNOHANG)[0] != 0
            ),
            "both runs to start",
        )
        children = [int(p.read_text()) for p in pid_files]
        assert all(_alive(pid) for pid in children)
        os.kill(parent, signal.SIGKILL)  # no handler runs: nothing can stop the children
        os.waitpid(parent, 0)
        _wait_for(lambda: not any(_alive(pid) for pid in children), "the children to end")
    finally:
        for pid in children:  # on a failure, leave nothing running
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    # The rerun (this process, no children) trains both runs again in their folders: no
    # run is failed, no error.txt is left, and each log is this attempt's alone.
    lines: list[str] = []
    spec = cmp.make_spec(recipes="grpo", arms="plain,rcc", seeds="0", output_dir=out)
    report = cmp.run_compare(spec, echo=lines.append)
    assert report["failed"] == [] and report["busy"] == [] and report["pending"] == 0
    assert sorted(locking_training["calls"]) == [("grpo", "plain", 0), ("grpo", "rcc", 0)]
    assert not list(out.rglob("error.txt"))
    for arm in ("plain", "rcc"):
        log = (out / "grpo" / arm / "seed0" / "train.log").read_bytes()
        assert b"\0" not in log and b"training step" not in log


def test_a_rerun_leaves_a_live_runs_files_alone(tmp_path, locking_training):
    # A live process holds one run's folder (a run left by a compare killed where no
    # parent-death signal exists, or a train started by hand): the rerun neither marks it
    # failed nor opens its log, and runs the others.
    out = tmp_path / "out"
    live = out / "grpo" / "plain" / "seed0"
    live.mkdir(parents=True)
    write_file(live, "train.log", "step 1 of the live run\n")  # the log compare opened
    holder = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        lines: list[str] = []
        spec = cmp.make_spec(recipes="grpo", arms="plain,rcc", seeds="0", output_dir=out)
        report = cmp.run_compare(spec, echo=lines.append)
    finally:
        os.close(holder)
    assert (live / "train.log").read_text() == "step 1 of the live run\n"
    assert not (live / "error.txt").exists()
    assert report["failed"] == []
    assert report["busy"] == [{"recipe": "grpo", "arm": "plain", "seed": 0, "folder": str(live)}]
    assert locking_training["calls"] == [("grpo", "rcc", 0)]
    assert any(line.startswith("BUSY   grpo/plain/seed0: a live process holds") for line in lines)
    assert "Left alone, a live process holds its folder" in (out / "results.md").read_text()
    # once it has ended, the next rerun does it
    locking_training["calls"].clear()
    report = cmp.run_compare(spec, echo=lines.append)
    assert locking_training["calls"] == [("grpo", "plain", 0)]
    assert report["busy"] == [] and report["failed"] == []


def test_a_warm_start_a_live_process_builds_is_left_alone(tmp_path, locking_training):
    # The warm-start folder used to be removed and rebuilt under its live builder.
    out = tmp_path / "out"
    cache = out / "sft-cache" / "seed0"
    cache.mkdir(parents=True)
    (cache / "being-built").write_text("by a live process\n")
    holder = os.open(cache, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        lines: list[str] = []
        spec = cmp.make_spec(recipes="grpo", arms="plain,rcc", seeds="0", output_dir=out)
        report = cmp.run_compare(spec, echo=lines.append)
    finally:
        os.close(holder)
    assert (cache / "being-built").read_text() == "by a live process\n"
    assert sorted(b["arm"] for b in report["busy"]) == ["plain", "rcc"]
    assert report["failed"] == [] and locking_training["calls"] == []
    assert not list(out.rglob("error.txt"))
    assert any(line.startswith("BUSY warm start of seed 0: the SFT warm start") for line in lines)


def test_a_second_compare_on_one_folder_is_refused_and_the_first_finishes_clean(
    tmp_path, locking_training
):
    out = tmp_path / "out"
    spec = cmp.make_spec(recipes="grpo", arms="plain,rcc", seeds="0", output_dir=out)
    locking_training["hold"].set()
    first: dict = {}
    thread = threading.Thread(target=lambda: first.update(cmp.run_compare(spec, echo=print)))
    thread.start()
    try:
        assert locking_training["started"].wait(PATIENCE_S)
        base = (out / "base-config.yaml").stat().st_mtime_ns
        with pytest.raises(UserError, match="another compare is running in this folder"):
            cmp.run_compare(spec, echo=print)
        assert (out / "base-config.yaml").stat().st_mtime_ns == base  # it wrote nothing
    finally:
        locking_training["go"].set()
        thread.join(PATIENCE_S)
    assert first["failed"] == [] and first["busy"] == [] and first["pending"] == 0
    assert not list(out.rglob("error.txt"))
    assert sorted(locking_training["calls"]) == [("grpo", "plain", 0), ("grpo", "rcc", 0)]


def _finished_folder(tmp_path: Path, locking_training) -> tuple[Path, cmp.CompareSpec]:
    out = tmp_path / "out"
    spec = cmp.make_spec(recipes="grpo", arms="plain", seeds="0", output_dir=out)
    cmp.run_compare(spec, echo=lambda line: None)
    locking_training["calls"].clear()
    return out / "grpo" / "plain" / "seed0" / "config.yaml", spec


def _edit(config_file: Path, **changes: object) -> None:
    """Rewrite a run's config.yaml with fields removed (value None) or changed."""
    header, _, body = config_file.read_text().partition("\n")
    saved = yaml.safe_load(body)
    for name, value in changes.items():
        if value is None:
            del saved[name]
        else:
            saved[name] = value
    config_file.write_text(header + "\n" + yaml.safe_dump(saved, sort_keys=True))


def test_a_folder_made_before_an_option_existed_is_reused(tmp_path, locking_training):
    # A run made by a version without id_field (and logging at another interval) has the
    # settings of today's at id_field's default: its result is reused, not refused.
    config_file, spec = _finished_folder(tmp_path, locking_training)
    _edit(config_file, id_field=None, logging_steps=7, save_steps=3)
    report = cmp.run_compare(spec, echo=lambda line: None)
    assert locking_training["calls"] == []  # reused, not rerun
    assert report["rows"][0]["seeds"] == [0] and report["failed"] == []
    # id_field set now (not its default) is another setting: refused, naming it
    with pytest.raises(ValueError, match=r"id_field: '\(unset\)' there, 'qid' now"):
        overrides = ["--id_field", "qid"]
        cmp.plan_runs(dataclasses.replace(spec, overrides=overrides))
    # and a changed training field still is
    _edit(config_file, learning_rate=0.5)
    with pytest.raises(ValueError, match=r"learning_rate: 0.5 there"):
        cmp.plan_runs(spec)


def test_resume_accepts_a_config_made_before_an_option_existed():
    from contrastive_rlvr.run.config_compare import config_differences
    from contrastive_rlvr.trainer.parse import parse_config

    current = parse_config(None, ["--output_dir", "x"]).to_dict()
    saved = {k: v for k, v in current.items() if k != "id_field"}
    assert config_differences(saved, current) == []
    changed = parse_config(None, ["--output_dir", "x", "--id_field", "qid"]).to_dict()
    assert config_differences(saved, changed) == ["id_field: (unset) -> 'qid'"]
