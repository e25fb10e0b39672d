"""Why `train` reads its YAML itself and hands TRL's ``TrlParser`` only the values: each
test runs ``TrlParser.parse_args_and_config`` (the version pyproject.toml pins) on a case
where the project keeps a guarantee, and asserts what TrlParser does instead, next to
what the project's parse does. docs/architecture.md, "Why the CLI parses its own YAML",
names the same cases; a test here that fails means TrlParser now keeps that guarantee and
the project's layer for it may go."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Iterator

import pytest
import yaml
from trl import TrlParser

from contrastive_rlvr.trainer import parse
from contrastive_rlvr.trainer.config import RLVRConfig

CONFIG = "model: embedded\nlearning_rate: 0.25\nmax_steps: 2\n"


@contextlib.contextmanager
def _pipe(text: str) -> Iterator[str]:
    """A path whose first read gives ``text`` and every later one nothing, as bash's
    process substitution ``<(...)`` is."""
    read, write = os.pipe()
    os.write(write, text.encode())
    os.close(write)
    try:
        yield f"/dev/fd/{read}"
    finally:
        os.close(read)


def _nested_bomb(levels: int, width: int = 9) -> str:
    """A YAML flow list ``levels`` deep, each level ``width`` copies of the one below (the
    first written out under an anchor, the rest aliases): ``width**levels`` strings from
    a few hundred bytes."""
    text = "[" + ", ".join(["x"] * width) + "]"
    for k in range(levels - 1):
        text = f"[&l{k} {text}, " + ", ".join([f"*l{k}"] * (width - 1)) + "]"
    return text


@dataclasses.dataclass
class _Fields:
    """Two fields, as RLVRConfig's ``max_steps`` and ``rewards`` are declared."""

    max_steps: int = 1
    rewards: list[str] = dataclasses.field(default_factory=list)


def _trl(args: list[str], dataclass: type = RLVRConfig):
    (config,) = TrlParser(dataclass).parse_args_and_config(args)
    return config


def test_trlparser_keeps_the_last_of_a_key_given_twice(tmp_path):
    config = tmp_path / "twice.yaml"
    config.write_text("model: embedded\nmax_steps: 2\nmax_steps: 3\n")
    # TrlParser: the first value is dropped without a word
    assert _trl(["--config", str(config), "--output_dir", str(tmp_path)]).max_steps == 3
    # the project: refused, naming both lines
    with pytest.raises(ValueError, match=r"'max_steps' is given twice \(lines 2 and 3\)"):
        parse.parse_config(config, ["--output_dir", str(tmp_path)])


def test_trlparser_loads_an_alias_bomb_without_a_bound(tmp_path):
    bomb = _nested_bomb(7)  # 9**7 = 4,782,969 strings
    assert len(bomb) < 400
    config = tmp_path / "bomb.yaml"
    config.write_text(f"rewards: {bomb}\n")
    # TrlParser: accepted; the value is one shared list per level, which any walk of it
    # (the type checks, a dump of the config, a hash) expands to 9**7 strings
    rewards = _trl(["--config", str(config)], _Fields).rewards
    level, depth = rewards, 0
    while isinstance(level, list):
        assert len(level) == 9 and all(item is level[0] for item in level[1:])
        level, depth = level[0], depth + 1
    assert (level, depth) == ("x", 7)
    # the project: refused before any Python object is built
    with pytest.raises(ValueError, match="expand to more than 100000 values"):
        parse.load_yaml(config)


def test_trlparser_reads_a_pipe_again_on_every_parse(tmp_path):
    with _pipe(CONFIG) as path:
        args = ["--config", path, "--output_dir", str(tmp_path)]
        assert _trl(args).learning_rate == 0.25
        # TrlParser opens the path itself each time, and takes no text read before it:
        # compare's second run from the same --config would find it empty
        with pytest.raises(ValueError, match="must contain a YAML mapping"):
            _trl(args)
    # the project: read once (as compare does), then every run built from that text
    with _pipe(CONFIG) as path:
        text = parse.read_config_text(path)
        runs = [parse.parse_config(path, ["--seed", str(s)], text=text) for s in (0, 1)]
    assert [r.learning_rate for r in runs] == [0.25, 0.25]


def test_trlparser_waits_forever_on_a_fifo_nobody_writes(tmp_path, monkeypatch):
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    got: list = []
    thread = threading.Thread(
        target=lambda: got.append(_trl(["--config", str(fifo), "--output_dir", str(tmp_path)])),
        daemon=True,
    )
    thread.start()
    thread.join(timeout=2.0)
    # TrlParser: still blocked in open() after 2 s, with no deadline to end it
    blocked = thread.is_alive()
    try:  # release it, so the test leaves no thread behind (no reader: nothing to release)
        writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        writer = None
    if writer is not None:
        os.write(writer, CONFIG.encode())
        os.close(writer)
    thread.join(timeout=60)
    assert blocked and got and got[0].learning_rate == 0.25
    # the project: one line naming the file once its wait (here 0.5 s) has passed
    monkeypatch.setenv("CONTRASTIVE_RLVR_PIPE_WAIT_S", "0.5")
    with pytest.raises(ValueError, match="nothing wrote to"):
        parse.parse_config(fifo, [])


def test_trlparser_without_a_config_starts_from_the_code_defaults(tmp_path):
    # TrlParser: no --config, RLVRConfig()'s values; the project: the embedded default's
    # YAML, or paper.yaml for any other --model (a layer before TrlParser chooses it)
    embedded = yaml.safe_load(parse.default_config_path().read_text())
    trl = _trl(["--output_dir", str(tmp_path)])
    ours = parse.parse_config(None, ["--output_dir", str(tmp_path)])
    assert trl.learning_rate == RLVRConfig.learning_rate == 1e-6
    assert ours.learning_rate == embedded["learning_rate"] == 1e-4
