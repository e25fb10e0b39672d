"""Two processes (CPU, gloo) run BiCC + RCC for two steps; the group statistics of
every step match the single-process run on the same data.

The processes are started with ``torch.distributed.run`` and the config's
``use_cpu=True`` makes accelerate pick gloo (MULTI_CPU). ``accelerate launch --cpu
--num_processes 2`` is not used: accelerate 1.15 starts a single process for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trainer_utils import GROUP, save_tiny_model

SCRIPT = Path(__file__).parents[1] / "scripts" / "group_stats_run.py"


def launch(args: list[str], processes: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    if processes == 1:
        cmd = [sys.executable, str(SCRIPT), *args]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(processes),
            "--master_port",
            "29517",
            str(SCRIPT),
            *args,
        ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_two_processes_match_one(tmp_path):
    model_dir = save_tiny_model(tmp_path / "tiny")
    one, two = tmp_path / "one", tmp_path / "two"
    launch([str(model_dir), str(one), str(2 * GROUP)], processes=1)
    launch([str(model_dir), str(two), str(GROUP)], processes=2)
    a = json.loads((one / "group_stats.json").read_text())
    b = json.loads((two / "group_stats.json").read_text())
    assert len(a) == len(b) == 2
    for step_a, step_b in zip(a, b, strict=True):
        assert step_a["rewards"] == step_b["rewards"]
        assert 0 < sum(step_a["rewards"]) < len(step_a["rewards"])  # mixed groups
        assert step_a["context_tokens_local"] == pytest.approx(step_b["context_tokens_local"])
        for key in ("delta", "advantages"):
            torch.testing.assert_close(
                torch.tensor(step_a[key]), torch.tensor(step_b[key]), atol=1e-5, rtol=1e-4
            )
    # Step 2 runs after one update: the deltas are no longer 0, and still agree.
    assert max(abs(x) for x in a[1]["delta"]) > 1e-4
