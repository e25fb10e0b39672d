"""Two processes (torchrun, CPU gloo) started into fresh folders: only the main process
plans and writes the output folder and builds the embedded warm start (the other waits),
the held-out evaluation runs once, and one summary is printed. Started five times in a
row, each into a fresh folder, it succeeds every time (before: 'output_dir already holds
a run' about 1 start in 4, and a half-written sft-model/config.json read by the other
process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ARGS = [
    "--use_cpu", "true", "--max_steps", "1", "--embedded_sft_steps", "2", "--eval_limit", "4",
    "--eval_n", "1", "--num_generations", "4", "--per_device_train_batch_size", "4",
    "--max_completion_length", "8", "--diagnostics_every", "0", "--deltas_every", "0",
    "--save_strategy", "no",
]  # fmt: skip


@pytest.mark.slow
def test_two_process_starts_succeed_five_times_with_one_summary(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    for attempt in range(5):
        out = tmp_path / f"run{attempt}"
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
            "--master_port", str(29540 + attempt), "-m", "contrastive_rlvr.cli", "train",
            "--output_dir", str(out), *ARGS,
        ]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (attempt, proc.stderr[-3000:])
        summaries = [line for line in proc.stdout.splitlines() if line.startswith("summary: ")]
        assert summaries == [f"summary: {out / 'summary.json'}"], (attempt, proc.stdout)
        assert proc.stdout.count("held-out avg@1:") == 1
        assert json.loads((out / "summary.json").read_text())["steps"] == 1
        assert (out / "config.json").exists() and (out / "sft-model" / "config.json").exists()
