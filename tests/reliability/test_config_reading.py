"""Config files are read once (a pipe, as ``--config <(...)`` gives, has its text for the
first read only), a FIFO without a writer is a one-line error after a timeout, and a YAML
alias bomb is refused before it is expanded."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from cli_utils import cli, one_line

from contrastive_rlvr import compare as cmp
from contrastive_rlvr.run.folder import CONFIG_FILE, save_resolved_config
from contrastive_rlvr.trainer import parse

CONFIG = "model: embedded\nlearning_rate: 0.25\nmax_steps: 2\n"
#: 7 levels of 9 aliases each: 9**7 = 4.8 million values from under 500 bytes.
BOMB = "".join(
    f"l{k}: &l{k} [{', '.join([f'*l{k - 1}' if k else 'x'] * 9)}]\n" for k in range(7)
)


def _pipe(text: str) -> str:
    """A path whose first read gives ``text`` and every later one nothing, as bash's
    process substitution ``<(...)`` is."""
    read, write = os.pipe()
    os.write(write, text.encode())
    os.close(write)
    return f"/dev/fd/{read}"


@pytest.fixture
def fake_runs(monkeypatch):
    """train() stand-in: records each run's learning rate and writes its config and
    summary as a real run does."""
    import contrastive_rlvr.run.command as run_module

    calls = []

    def fake_inputs(cfg, directory):
        (Path(directory) / "sft-model").mkdir(parents=True, exist_ok=True)
        (Path(directory) / "sft-model" / "config.json").write_text("{}")

    def fake_train(cfg, progress=True):
        out = Path(cfg.output_dir)
        calls.append(cfg.learning_rate)
        save_resolved_config(cfg, out / CONFIG_FILE)
        summary = {"heldout_avg@n_before": 0.5, "heldout_avg@n_after": 0.75, "eval_n": 1}
        (out / "summary.json").write_text(json.dumps(summary))

    monkeypatch.setattr(run_module, "load_run_inputs", fake_inputs)
    monkeypatch.setattr(run_module, "train", fake_train)
    return calls


def test_compare_reads_a_piped_config_once_for_every_run(tmp_path, fake_runs):
    out = tmp_path / "c"
    result = cli(["compare", "--config", _pipe(CONFIG), "--recipes", "grpo", "--arms",
                   "plain,bicc", "--seeds", "0,1", "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    # every run the user's learning rate (the built-in default, 1e-6, after the first read)
    assert fake_runs == [0.25] * 4
    assert (out / "base-config.yaml").read_text().endswith(CONFIG)


def test_train_reads_a_piped_config(tmp_path):
    cfg = parse.parse_config(_pipe(CONFIG), ["--output_dir", str(tmp_path)])
    assert cfg.learning_rate == 0.25 and cfg.max_steps == 2


def test_a_fifo_without_a_writer_is_one_line_after_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTRASTIVE_RLVR_PIPE_WAIT_S", "0.5")
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    one_line(cli(["train", "--config", str(fifo)]), 2, "nothing wrote to for 0.5 s")
    # with a writer that takes its time, the whole text arrives
    monkeypatch.setenv("CONTRASTIVE_RLVR_PIPE_WAIT_S", "30")

    def writer() -> None:
        with fifo.open("w") as f:
            for line in CONFIG.splitlines(keepends=True):
                f.write(line)
                f.flush()

    thread = threading.Thread(target=writer)
    thread.start()
    assert parse.read_config_text(fifo) == CONFIG
    thread.join()


def test_an_alias_bomb_in_train_config_is_refused_before_expansion(tmp_path):
    config = tmp_path / "bomb.yaml"
    assert len(BOMB) < 500
    config.write_text(BOMB + "model: embedded\nrewards: *l6\n")
    one_line(cli(["train", "--config", str(config)]), 2,
              "expand to more than 100000 values")  # fmt: skip


def test_an_alias_bomb_in_compare_spec_overrides_is_refused(tmp_path):
    spec = tmp_path / "spec.yaml"
    indented = "".join("  " + line + "\n" for line in BOMB.splitlines())
    spec.write_text("overrides:\n" + indented)
    with pytest.raises(ValueError, match="expand to more than 100000 values"):
        cmp.make_spec(spec)


def test_an_alias_that_contains_itself_is_refused():
    with pytest.raises(parse.YAMLTooLarge, match="refers to its own anchor"):
        parse.safe_yaml("a: &a [1, *a]\n")


def test_small_aliases_still_load():
    # 3 values aliased 3 times: far under the bound, as a config that shares a list would.
    assert parse.safe_yaml("a: &a [1, 2, 3]\nb: *a\nc: *a\n") == {
        "a": [1, 2, 3], "b": [1, 2, 3], "c": [1, 2, 3],
    }  # fmt: skip
