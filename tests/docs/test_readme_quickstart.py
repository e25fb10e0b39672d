"""The README's quick starts run as written: the Python block and the command-line block
are read out of README.md and run on the tiny model (in place of SmolLM2, which takes
minutes a step here; its 256 positions keep the command line's completions to 64 tokens),
with a problem file in place of the user's."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from inputs.test_trl_dataset_formats import chat_model

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MODEL_ALIAS = "smollm2-135m"


def _block(heading: str, language: str) -> str:
    """The first ``language`` code block of the README section titled ``heading``."""
    section = README.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert match, f"no {language} block under '## {heading}'"
    return match.group(1)


def _problems(path: Path, n: int = 40) -> Path:
    """``n`` problems; 40, the small file a first user tries (its held-out split fits it)."""
    rows = [{"prompt": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def test_python_quick_start_runs_as_written(tmp_path):
    code = _block("Python quick start", "python")
    assert f'model="{MODEL_ALIAS}"' in code  # the quick start names the offline alias
    model = chat_model(tmp_path / "tiny")
    script = tmp_path / "quickstart.py"
    script.write_text(code.replace(f'"{MODEL_ALIAS}"', json.dumps(str(model))))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "runs" / "quickstart"
    # the CLI's train in Python: the rows prepared as the CLI prepares them (chat template,
    # instruction), a held-out split that fits the 64 rows, its samples and the summary
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["heldout_before"]["problems"] == 64 // 5
    first = json.loads((out / "samples" / "heldout_before.jsonl").read_text().splitlines()[0])
    assert first["prompt"].startswith("<user>What is ") and "\\boxed{}" in first["prompt"]
    assert "- dataset: `sums.jsonl`" in (out / "README.md").read_text()
    last = done.stdout.strip().splitlines()[-1]
    assert last == f"{summary['heldout_avg@n_before']} -> {summary['heldout_avg@n_after']}"


def _commands(block: str) -> list[list[str]]:
    """The block's commands (backslash continuations joined, comments dropped)."""
    text = re.sub(r"\\\n\s*", " ", block)
    commands = []
    for line in text.splitlines():
        line = line.split("  #", 1)[0].strip()
        if line and not line.startswith("#"):
            commands.append(shlex.split(line))
    return commands


def test_cli_quick_start_runs_as_written(tmp_path):
    heading = "Command-line quick start: BiCC + RCC on your model and data"
    commands = _commands(_block(heading, "bash"))
    assert [c[:2] for c in commands] == [
        ["contrastive-rlvr", "premise"],
        ["contrastive-rlvr", "train"],
        ["contrastive-rlvr", "eval"],
        ["contrastive-rlvr", "report"],
    ]
    model = chat_model(tmp_path / "tiny")
    _problems(tmp_path / "my_problems.jsonl")
    for command in commands:
        args = [str(model) if a == MODEL_ALIAS else a for a in command[1:]]
        # the tiny model has 256 positions: its completions are kept to 64 tokens
        for i, a in enumerate(args[:-1]):
            if a in ("--max_completion_length", "--max-new-tokens"):
                args[i + 1] = "64"
        done = subprocess.run([sys.executable, "-m", "contrastive_rlvr.cli", *args], cwd=tmp_path,
                              env=_env(), capture_output=True, text=True, timeout=1200,
                              check=False)  # fmt: skip
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-3000:])
    assert (tmp_path / "runs" / "mine" / "report.html").exists()
