"""Inputs that are pipes (a FIFO nobody writes to must not hang a command) and csv rows
that span lines (errors name the line the row is on). Each test makes the fault happen."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest
from cli_utils import one_line
from typer.testing import CliRunner

from contrastive_rlvr.cli import app
from contrastive_rlvr.data import load_prompts
from contrastive_rlvr.pipe_input import PIPE_WAIT_ENV, read_config_text
from contrastive_rlvr.trainer.parse import load_yaml

#: When a broken reader blocks in open() anyway, a stand-in writer writes a line that no
#: reader accepts after this long, so the test fails instead of hanging; far longer than
#: the 1-second wait the tests set, so a working reader never meets it.
RESCUE_AFTER_S = 60


class _Rescuer:
    """Writes an unreadable line to ``fifo`` once ``RESCUE_AFTER_S`` has passed, unless
    stopped first: a reader stuck in a blocking open() is released, and fails."""

    def __init__(self, fifo: Path) -> None:
        self.fifo, self.done = fifo, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self.done.wait(RESCUE_AFTER_S):
            return
        while not self.done.is_set():
            try:
                fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, b"{released: [by the test's stand-in writer\n")
                os.close(fd)
                return
            except OSError as err:  # ENXIO: no reader yet
                if err.errno != errno.ENXIO:
                    raise
                time.sleep(0.05)

    def __enter__(self) -> _Rescuer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


@pytest.fixture
def fifo(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "config.yaml"
    os.mkfifo(path)
    monkeypatch.setenv(PIPE_WAIT_ENV, "1")
    return path


def test_train_config_fifo_with_no_writer_is_one_line(fifo, tmp_path):
    with _Rescuer(fifo):
        result = CliRunner().invoke(app, ["train", "--config", str(fifo)])
    one_line(result, 2, f"config file {fifo} is a pipe (FIFO) that nothing wrote to for 1 s")


def test_compare_config_fifo_with_no_writer_is_one_line(fifo, tmp_path):
    with _Rescuer(fifo):
        args = ["compare", "--config", str(fifo), "--out", str(tmp_path / "o"), "--seeds", "0"]
        result = CliRunner().invoke(app, args)
    one_line(result, 2, "is a pipe (FIFO) that nothing wrote to for 1 s")
    assert not (tmp_path / "o").exists()


def test_a_config_pipe_with_a_writer_is_read_whole(fifo):
    # What `--config <(make-config)` hands over: a pipe whose writer comes later and
    # writes in pieces.
    def writer() -> None:
        time.sleep(0.2)
        with open(fifo, "w") as f:
            f.write("max_steps: 3\n")
            f.flush()
            time.sleep(0.2)
            f.write("learning_rate: 0.5\n")

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert load_yaml(fifo) == {"max_steps": 3, "learning_rate": 0.5}
    finally:
        thread.join()


def test_a_regular_config_file_reads_as_before(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("max_steps: 2\n")
    assert read_config_text(path) == "max_steps: 2\n"


def test_a_dataset_fifo_is_refused_in_one_line(tmp_path):
    data = tmp_path / "data.jsonl"
    os.mkfifo(data)
    with _Rescuer(data):
        with pytest.raises(ValueError, match=r"is a pipe \(FIFO\), not a regular file"):
            load_prompts(data)


# ---------------------------------------------------------------------- csv line numbers


def test_csv_errors_name_the_line_when_a_prompt_spans_lines(tmp_path):
    f = tmp_path / "p.csv"
    f.write_text(
        "question,answer\n"  # line 1: header
        "what is 2+2?,4\n"  # line 2
        '"a prompt\nover three\nlines",9\n'  # lines 3-5
        "\n"  # line 6: blank, no row
        ",7\n"  # line 7: no question
    )
    with pytest.raises(ValueError, match=rf"{f} line 7: missing field 'prompt'"):
        load_prompts(f)
    f.write_text('question,answer\n"two\nlines",\n')
    with pytest.raises(ValueError, match=rf"{f} lines 2-3: "):
        load_prompts(f)
