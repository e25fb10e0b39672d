"""The figure of docs/real-model.md: a real-model run's training curves, read back
from its ``metrics.jsonl``, with the held-out accuracy before and after.

    python benchmarks/real_model_figure.py runs/real-smollm2 docs/results/real-model/curves.png

RUN is the folder of ``benchmarks/real_model_run.sh`` (its ``train/`` run and the
``eval-before/`` and ``eval-after/`` results) or a training run folder itself (then
the held-out markers are the trainer's own ``summary.json`` avg@n). The clip share
is read under the name the run's loss logged it: ``clip/frac`` (the project's loss)
or ``clip_ratio/region_mean`` (TRL's ``_compute_loss``; docs/metrics.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from contrastive_rlvr.metrics import CLIP_FRACTION_KEYS  # noqa: E402

#: Steps of the reward's trailing moving mean.
WINDOW = 4


def read_metrics(train_dir: Path) -> list[dict]:
    path = train_dir / "metrics.jsonl"
    if not path.exists():
        raise SystemExit(f"{path} not found: RUN must be a training run or hold one in train/")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def series(rows: list[dict], *keys: str) -> tuple[str | None, list[int], list[float]]:
    """The first of ``keys`` some row logs, and its steps and values (None: none logged)."""
    for key in keys:
        pairs = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pairs:
            return key, [s for s, _ in pairs], [float(v) for _, v in pairs]
    return None, [], []


def heldout(run: Path, train_dir: Path) -> tuple[float | None, float | None, str]:
    """Held-out accuracy before and after, and what it is (the label)."""
    files = [run / name / "results.json" for name in ("eval-before", "eval-after")]
    if all(f.exists() for f in files):
        values = [next(iter(json.loads(f.read_text())["benchmarks"].values())) for f in files]
        n = values[0].get("n", "n")
        return values[0]["avg_at_n"], values[1]["avg_at_n"], f"held-out avg@{n} (eval)"
    summary = train_dir / "summary.json"
    if summary.exists():
        s = json.loads(summary.read_text())
        label = f"trainer's held-out avg@{s.get('eval_n', 'n')}"
        return s.get("heldout_avg@n_before"), s.get("heldout_avg@n_after"), label
    return None, None, ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the run folder of benchmarks/real_model_run.sh")
    parser.add_argument("out", type=Path, help="the PNG to write")
    args = parser.parse_args(argv)
    train = args.run / "train" if (args.run / "train" / "metrics.jsonl").exists() else args.run
    rows = read_metrics(train)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    _, steps, reward = series(rows, "reward")
    if not steps:
        raise SystemExit(f"{train / 'metrics.jsonl'} logs no 'reward': not a training run")
    windows = [reward[max(0, i - WINDOW + 1) : i + 1] for i in range(len(reward))]
    smooth = [sum(w) / len(w) for w in windows]
    axes[0].plot(steps, reward, "o-", alpha=0.4, label="reward per step")
    axes[0].plot(steps, smooth, "-", lw=2, label=f"moving mean ({WINDOW} steps)")
    before, after, label = heldout(args.run, train)
    if before is not None and after is not None:
        axes[0].plot([0], [before], "s", color="k", label=f"{label} before / after")
        axes[0].plot([steps[-1]], [after], "s", color="k")
    axes[0].set(xlabel="step", ylabel="accuracy", title="reward and held-out accuracy")
    axes[0].legend(fontsize=7)
    _, s, length = series(rows, "completions/mean_length")
    axes[1].plot(s, length, "o-")
    axes[1].set(xlabel="step", ylabel="tokens", title="mean completion length")
    ctx_key, s, ctx = series(rows, "bicc/context_tokens")
    if ctx_key:
        axes[2].plot(s, ctx, "o-", label=ctx_key)
    clip_key, s, clip = series(rows, *CLIP_FRACTION_KEYS)
    if clip_key:
        axes[2].plot(s, [100 * c for c in clip], "o-", label=f"{clip_key} (%)")
    missing = [k for k, found in (("BiCC context", ctx_key), ("clip share", clip_key)) if not found]
    title = "BiCC context and clipping" + (
        f" ({', '.join(missing)}: not logged)" if missing else ""
    )
    axes[2].set(xlabel="step", title=title)
    if ctx_key or clip_key:
        axes[2].legend(fontsize=7)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out} (clip share from {clip_key or 'nothing logged'})")


if __name__ == "__main__":
    main()
