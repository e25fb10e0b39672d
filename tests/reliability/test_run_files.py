"""The one way to write into and read from a run's folder (``run_files``), each guarantee
made to fail: a name that leaves the folder, a planted link, the user's own file, a write
cut short, the umask, a live writer's lock, a FIFO, /dev/zero, a size bound, a torn line."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import pytest

from contrastive_rlvr.errors import UserError
from contrastive_rlvr.run.folder_lock import OutputDirLock
from contrastive_rlvr.run_files import (
    MAX_READ_ENV,
    OWNER_RECORD,
    build_folder,
    claim,
    open_append,
    open_atomic,
    read_json,
    read_jsonl,
    read_text,
    write_file,
)


@pytest.mark.parametrize("name", ["../x.json", "a/../../x.json", "/tmp/x.json", ""])
def test_a_name_outside_the_folder_is_refused(tmp_path, name):
    with pytest.raises(UserError, match="not a file name inside"):
        write_file(tmp_path / "run", name, "x")
    assert not (tmp_path / "x.json").exists()


def test_a_link_at_the_file_or_at_a_folder_between_is_refused_not_followed(tmp_path):
    run, victim = tmp_path / "run", tmp_path / "victim.txt"
    run.mkdir()
    victim.write_text("the user's\n")
    (run / "summary.json").symlink_to(victim)
    with pytest.raises(UserError, match="summary.json is a symbolic link"):
        write_file(run, "summary.json", "{}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "samples").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UserError, match="samples is a symbolic link"):
        write_file(run, "samples/a.jsonl", "{}\n")
    with pytest.raises(UserError, match="symbolic link"):
        with open_append(run, "summary.json") as f:
            f.write("x")
    assert victim.read_text() == "the user's\n" and not list(elsewhere.iterdir())
    assert (run / "summary.json").is_symlink()


def test_a_file_no_run_wrote_is_never_replaced_and_one_it_wrote_is(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "premise.txt").write_text("my notes\n")
    with pytest.raises(UserError, match="no run of this project wrote it"):
        write_file(run, "premise.txt", "table\n")
    assert (run / "premise.txt").read_text() == "my notes\n"
    write_file(run, "premise.json", "{}\n")  # new: written and recorded
    write_file(run, "premise.json", '{"a": 1}\n')  # recorded: replaced
    assert "premise.json" in (run / OWNER_RECORD).read_text().split()
    write_file(run, "premise.txt", "table\n", replace_foreign=True)  # told to replace it
    # in a folder whose config.yaml a run wrote, every file is the run's
    run2 = tmp_path / "run2"
    run2.mkdir()
    (run2 / "config.yaml").write_text(
        "# contrastive-rlvr train: the resolved config of the run in this folder\nseed: 0\n"
    )
    (run2 / "summary.json").write_text("{}")
    write_file(run2, "summary.json", '{"steps": 1}')


def test_a_write_is_whole_or_absent(tmp_path):
    write_file(tmp_path, "results.json", "old\n")
    with pytest.raises(RuntimeError), open_atomic(tmp_path, "results.json") as f:
        f.write("half of the new")
        raise RuntimeError("killed mid-write")
    assert (tmp_path / "results.json").read_text() == "old\n"
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_are_made_as_the_umask_says(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        write_file(tmp_path, "report.html", "<html>")
        with open_append(tmp_path, "metrics.jsonl") as f:
            f.write("{}\n")
        with build_folder(tmp_path, "merged") as tmp:
            (tmp / "config.json").write_text("{}")
    finally:
        os.umask(old)
    for name in ("report.html", "metrics.jsonl"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name
    assert stat.S_IMODE((tmp_path / "merged").stat().st_mode) == 0o777 & ~umask


#: A live writer: the flock OutputDirLock takes on the folder, in another process.
HOLDER = """
import fcntl, os, sys, time
os.makedirs(sys.argv[1], exist_ok=True)
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("held", flush=True)
time.sleep(60)
"""


def test_a_folder_a_live_process_holds_is_refused_and_the_holders_own_writes_pass(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match="in use by another run"):
            write_file(run, "results.json", "{}")
        assert not (run / "results.json").exists()
    finally:
        holder.kill()
        holder.wait()
    with OutputDirLock(run):  # this process holds it: its own writes go through
        write_file(run, "results.json", "{}")
        with open_append(run, "metrics.jsonl") as f:
            f.write("{}\n")


def test_a_merged_model_folder_replaces_only_its_own(tmp_path):
    (tmp_path / "merged").mkdir()
    (tmp_path / "merged" / "mine.txt").write_text("the user's model\n")
    with pytest.raises(UserError, match="no run of this project made it"):
        with build_folder(tmp_path, "merged") as tmp:
            (tmp / "config.json").write_text("{}")
    assert (tmp_path / "merged" / "mine.txt").exists()
    assert not list(tmp_path.glob(".merged.*"))
    (tmp_path / "merged2").symlink_to(tmp_path / "merged", target_is_directory=True)
    with pytest.raises(UserError, match="symbolic link"), build_folder(tmp_path, "merged2"):
        pass
    with build_folder(tmp_path, "merged3") as tmp:
        (tmp / "config.json").write_text("{}")
    with build_folder(tmp_path, "merged3") as tmp:  # its own: replaced whole
        (tmp / "model.safetensors").write_text("x")
    assert sorted(p.name for p in (tmp_path / "merged3").iterdir()) == ["model.safetensors"]


# ------------------------------------------------------------------------------ reading


def test_a_fifo_is_refused_at_once_never_waited_on(tmp_path):
    fifo = tmp_path / "summary.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(UserError, match=r"summary.json is a pipe \(FIFO\), not a regular file"):
        read_json(fifo)
    assert time.monotonic() - started < 2


def test_a_link_to_dev_zero_is_refused_before_any_byte_is_read(tmp_path):
    (tmp_path / "metrics.jsonl").symlink_to("/dev/zero")
    with pytest.raises(UserError, match="metrics.jsonl is a device"):
        read_jsonl(tmp_path / "metrics.jsonl")


def test_a_file_past_the_size_bound_is_refused_naming_it(tmp_path, monkeypatch):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n' * 100)
    monkeypatch.setenv(MAX_READ_ENV, "500")
    with pytest.raises(UserError, match=f"metrics.jsonl is 1200 bytes.*{MAX_READ_ENV}"):
        read_text(tmp_path / "metrics.jsonl")


def test_a_torn_last_line_is_dropped_and_a_bad_line_before_it_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "rew')
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]
    path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(UserError, match=r"metrics.jsonl: line 2 is not JSON"):
        read_jsonl(path)
    (tmp_path / "summary.json").write_text('{"steps": 4, "heldout')
    with pytest.raises(UserError, match=r"summary.json is not JSON \(it ends early"):
        read_json(tmp_path / "summary.json")


def test_claim_refuses_a_linked_record(tmp_path):
    (tmp_path / OWNER_RECORD).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UserError, match="symbolic link"):
        claim(tmp_path / "x.json")
    assert not (tmp_path / "elsewhere").exists()


def test_a_logs_tail_is_read_without_reading_the_whole_and_a_device_is_refused(tmp_path):
    from contrastive_rlvr.run_files import read_tail

    (tmp_path / "train.log").write_text("x" * 10_000 + "the end\n")
    assert read_tail(tmp_path / "train.log", 8) == "the end\n"
    (tmp_path / "linked.log").symlink_to("/dev/zero")
    with pytest.raises(UserError, match="linked.log is a device"):
        read_tail(tmp_path / "linked.log", 8)
