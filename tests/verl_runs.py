"""Running verl's own ``main_ppo`` on this CPU machine, shared by the real-worker tests
(tests/scale_out/test_verl_real_workers.py) and benchmarks/two_engines.py.

- :func:`build_task`: the embedded tiny Llama (SFT warm start: right on about half the
  problems, so groups hold both outcomes), its tokenizer with a chat template, and the
  arithmetic task as verl parquet (no download);
- :func:`devices`: one node of logical GPUs on the CPU and the transformers rollout of
  :mod:`verl_cpu`;
- :func:`main_ppo`: verl's entry point as a user runs it, in its own session, with the
  metrics of verl's file logger read back by step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes" / "verl"
TESTS = Path(__file__).resolve().parent
RUN_TIMEOUT_S = 900

#: verl renders chat prompts with the tokenizer's template: the prompt text after <bos>,
#: as the embedded model was warm-started on (and as the TRL path feeds it).
CHAT_TEMPLATE = "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"


def build_task(root: Path, *, train_rows: int = 64, val_rows: int = 8) -> dict[str, Any]:
    """The warm-started tiny model in ``root/model`` and the task's first ``train_rows``
    and ``val_rows`` problems as verl parquet; also returns the datasets themselves."""
    import pandas as pd

    from contrastive_rlvr.embedded import build_embedded_default

    model_dir = root / "model"
    _, tokenizer, train, heldout = build_embedded_default(model_dir, seed=0, sft_steps=300)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(model_dir)

    def parquet(ds, name: str, n: int) -> Path:
        rows = [
            {
                "data_source": "arithmetic",
                "prompt": [{"role": "user", "content": ex["prompt"]}],
                "reward_model": {"style": "rule", "ground_truth": ex["answer"]},
                "extra_info": {"index": i},
            }
            for i, ex in enumerate(ds.select(range(n)))
        ]
        path = root / f"{name}.parquet"
        pd.DataFrame(rows).to_parquet(path)
        return path

    return {
        "model": model_dir,
        "train": parquet(train, "train", train_rows),
        "val": parquet(heldout, "val", val_rows),
        "root": root,
        "train_rows": train.select(range(train_rows)),
        "val_rows": heldout.select(range(val_rows)),
    }


#: What each of the project's asynchronous modes needs on this CPU, besides the mode: verl's
#: ``separate_async`` trains on ``trainer.n_gpus_per_node`` logical GPUs and generates on
#: its own pool (one more logical GPU), takes the weights through a checkpoint engine that
#: is not the in-process one (:mod:`verl_cpu`'s ``cpu_kv``), and splits a step's prompts
#: into ``parameter_sync_step`` mini-batches of ``ppo_mini_batch_size`` each (4 = 2 x 2).
ASYNC_MODES = {
    "crlvr_colocate_async": [],
    "crlvr_separate_async": [
        "trainer.v1.separate_async.parameter_sync_step=2",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=cpu_kv",
    ],
}


def mode_overrides(mode: str) -> list[str]:
    """The overrides that select ``mode`` (a ``crlvr_*`` trainer) on this CPU."""
    return [f"trainer.v1.trainer_mode={mode}", *ASYNC_MODES.get(mode, [])]


def rollout_gpus(mode: str) -> int:
    """Logical GPUs the mode's standalone rollout pool takes (``separate_async``: 1)."""
    return 1 if mode == "crlvr_separate_async" else 0


def devices(ranks: int, rollout: int = 0) -> list[str]:
    """Devices and the rollout backend: one node of ``ranks`` logical GPUs on the CPU (and
    ``rollout`` more for a standalone rollout pool), the transformers rollout (random
    weights until the actor's first sync), its log-probs returned so they can be compared
    with the actor's."""
    return [
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={ranks}",
        "trainer.device=cpu",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.load_format=dummy",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        # no flash-attn on a CPU: torch's attention, and so the padded forward (verl's
        # padding-free one packs rows for flash-attn's variable-length kernel)
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.model.use_remove_padding=false",
        "+ray_kwargs.ray_init.num_gpus=" + str(ranks + rollout),
        "ray_kwargs.ray_init.num_cpus=8",
    ]


def main_ppo(
    recipe: str,
    overrides: list[str],
    out: Path,
    log_name: str,
    *,
    python: str = sys.executable,
    modules: tuple[str, ...] = ("verl_cpu",),
    env: dict[str, str] | None = None,
    timeout_s: float = RUN_TIMEOUT_S,
) -> tuple[int, dict[int, dict], str]:
    """Run verl's entry point as a user would; return (exit code, metrics by step, log
    text). ``python``: the interpreter of verl's environment; ``modules``: the test-side
    modules every process of the run loads (verl's ``VERL_USE_EXTERNAL_MODULES``)."""
    metrics_path = out / f"{log_name}.jsonl"
    log_path = out / f"{log_name}.log"
    run_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(TESTS)]),
        "VERL_USE_EXTERNAL_MODULES": ",".join(modules),
        "VERL_PLATFORM": "cpu",
        "VERL_ENGINE_DEVICE": "cuda",
        "VERL_FILE_LOGGER_PATH": str(metrics_path),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "RAY_DEDUP_LOGS": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        **(env or {}),
    }
    cmd = [
        python,
        "-m",
        "verl.trainer.main_ppo",
        "--config-path",
        str(RECIPES),
        "--config-name",
        recipe,
        *overrides,
    ]
    with open(log_path, "w") as log:
        # its own session, so that Ray's processes go with it whatever happens
        proc = subprocess.Popen(
            cmd, cwd=out, env=run_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = -1
        finally:
            kill_session(proc.pid)
    steps: dict[int, dict] = {}
    if metrics_path.exists():
        for line in metrics_path.read_text().splitlines():
            record = json.loads(line)
            steps.setdefault(int(record["step"]), {}).update(record["data"])
    return code, steps, log_path.read_text()


def kill_session(sid: int) -> None:
    """Kill every process left in the run's session: Ray gives each worker its own
    process group, and a worker can outlive a driver that exited cleanly."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # fields after the command name (in parentheses): state ppid pgrp session ...
            if int(stat.rsplit(")", 1)[1].split()[3]) == sid:
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue


def compose_recipe(name: str) -> Any:
    """A shipped verl recipe composed as ``main_ppo`` composes it (Hydra, verl's defaults)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(RECIPES), version_base=None):
        return compose(config_name=name)


def with_overrides(cfg: Any, **dotted: Any) -> Any:
    """A copy of ``cfg`` with each dotted key set (as ``key=value`` on the command line)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(OmegaConf.to_container(cfg))
    for key, value in dotted.items():
        OmegaConf.update(cfg, key, value, merge=False)
    return cfg
