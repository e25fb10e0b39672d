"""Faults a real cluster sends: SIGTERM (SLURM, Kubernetes, ``timeout``) is Ctrl-C, a full
disk in torch's own words is the disk-full line, a memory limit is one line, and values no
run can use are refused before anything starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from cli_utils import cli, one_line

from contrastive_rlvr.cli import _run
from contrastive_rlvr.failure_lines import disk_full

#: A child that waits under sigterm_as_sigint and says what stopped it.
CHILD = """
import time
from contrastive_rlvr.termination import sigterm_as_sigint
with sigterm_as_sigint():
    try:
        print("ready", flush=True)
        time.sleep(30)
    except KeyboardInterrupt:
        print("stopped as by Ctrl-C", flush=True)
        raise SystemExit(130)
"""


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_to_a_real_child_is_ctrl_c(sigint):
    # "ignored": a job started with & or nohup inherits SIGINT ignored; SIGTERM still stops it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def before() -> None:
        handler = signal.SIG_IGN if sigint == "ignored" else signal.SIG_DFL
        signal.signal(signal.SIGINT, handler)

    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             env=env, preexec_fn=before)  # fmt: skip
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=20)
    assert child.returncode == 130 and "stopped as by Ctrl-C" in out


def test_sigterm_during_a_command_prints_the_note_and_exits_130(capsys):
    import typer

    def waits() -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal, as `timeout` sends it
        time.sleep(5)
        raise AssertionError("SIGTERM did not stop the command")

    with pytest.raises(typer.Exit) as info:
        _run(waits, _on_interrupt=lambda: "interrupted; continue with: ...")
    assert info.value.exit_code == 130
    assert "interrupted; continue with" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # restored after


def test_sigterm_during_a_checkpoint_write_is_held_until_it_is_whole(tmp_path):
    from contrastive_rlvr.termination import sigterm_as_sigint
    from contrastive_rlvr.trainer.interrupts import held_interrupts

    folder = tmp_path / "checkpoint-1"
    with pytest.raises(KeyboardInterrupt), sigterm_as_sigint(), held_interrupts(folder):
        folder.mkdir()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)  # the handler runs: held, not raised
        (folder / "trainer_state.json").write_text("{}")  # the write goes on to its end
    assert (folder / "trainer_state.json").is_file()  # whole, then stopped


@pytest.mark.parametrize(
    "text",
    [
        "[enforce fail at inline_container.cc:595] . unexpected pos 4096 vs 2048",
        "basic_ios::clear: iostream error",
    ],
)
def test_torchs_full_disk_wording_is_the_disk_full_line(text):
    line = disk_full(RuntimeError(text))
    assert line is not None and line.startswith("disk full")


@pytest.mark.parametrize(
    "error",
    [
        MemoryError(),
        RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
                     "allocate memory: you tried to allocate 245760 bytes. Error code 12 "
                     "(Cannot allocate memory)"),  # torch under ulimit -v 1200000
        OSError(12, "Cannot allocate memory"),
    ],
)  # fmt: skip
def test_a_memory_limit_is_one_line(capsys, error):
    import typer

    def allocates() -> None:
        raise error

    with pytest.raises(typer.Exit) as info:
        _run(allocates)
    assert info.value.exit_code == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "out of memory" in err and "ulimit -v" in err


def test_a_negative_seed_is_refused_when_the_config_is_built(tmp_path):
    one_line(cli(["train", "--seed", "-1", "--output_dir", str(tmp_path)]), 2, "seed=-1")


@pytest.mark.parametrize("name", ["HF_HOME", "CONTRASTIVE_RLVR_CACHE", "HF_DATASETS_CACHE"])
def test_a_cache_variable_naming_a_file_is_one_line_in_every_command(tmp_path, monkeypatch, name):
    (tmp_path / "a-file").write_text("not a folder\n")
    monkeypatch.setenv(name, str(tmp_path / "a-file"))
    for args in (
        ["train", "--output_dir", str(tmp_path / "o")],
        ["eval", "--model", "m", "--output_dir", str(tmp_path / "e")],
        ["compare", "--out", str(tmp_path / "c"), "--recipes", "grpo"],
        ["premise", "--output_dir", str(tmp_path / "p")],
    ):
        one_line(cli(args), 2, f"{name}={str(tmp_path / 'a-file')!r} names a file")
    monkeypatch.setenv(name, str(tmp_path / "a-file" / "cache"))
    one_line(cli(["train", "--output_dir", str(tmp_path / "o")]), 2, "(under ")


def test_a_read_only_file_system_is_one_line(capsys):
    import errno

    import typer

    def writes() -> None:
        raise OSError(errno.EROFS, "Read-only file system", "/mnt/ro/premise.json")

    with pytest.raises(typer.Exit) as info:
        _run(writes)
    assert info.value.exit_code == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "read-only (/mnt/ro/premise.json)" in err


def _under_address_limit(limit_bytes: int, args: list[str], cwd) -> subprocess.CompletedProcess:
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "contrastive_rlvr.cli", *args],
        preexec_fn=limit, capture_output=True, text=True, timeout=300, cwd=cwd, env=env,
    )  # fmt: skip


def test_an_address_space_too_small_for_torch_is_refused_before_it_is_imported(tmp_path):
    # Under ~700 MB importing torch aborts in C++ (no Python handler runs): the limit is
    # read before any command imports it. 600 MB here; the line names it in MiB.
    done = _under_address_limit(600 * 2**20, ["train", "--output_dir", "o"], tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "error: the address-space limit (ulimit -v) is 600 MiB, below the 1024 MiB importing "
        "torch needs (under it the import aborts); raise it (ulimit -v unlimited, or the "
        "job's memory request)"
    ]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("limit_mb", [1100, 1300, 2000])
def test_a_real_memory_limit_is_one_line_wherever_it_is_met(tmp_path, limit_mb):
    # Measured: under 1.1 GB a pyarrow worker thread cannot start, under 1.3 GB torch's
    # allocator fails, under 2 GB Python raises MemoryError, some while a command's body
    # imports TRL (before the command's own error policy): each is one line, exit 1.
    done = _under_address_limit(limit_mb * 2**20, ["train", "--max_steps", "1",
                                                   "--output_dir", "o"], tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "ulimit -v" in errors[0]
