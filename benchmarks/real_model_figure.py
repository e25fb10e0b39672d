"""The figure of docs/real-model.md: a real-model run's training curves, read back
from its TensorBoard event files, with the held-out accuracy before and after.

    python benchmarks/real_model_figure.py runs/real-smollm2 docs/results/real-model/curves.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)


def scalars(train_dir: Path, tag: str) -> tuple[list[int], list[float]]:
    """Steps and values of one scalar tag in the run's (first) event file folder."""
    folder = next(train_dir.rglob("events.out.tfevents.*")).parent
    acc = EventAccumulator(str(folder))
    acc.Reload()
    events = acc.Scalars(tag)
    return [e.step for e in events], [e.value for e in events]


def heldout(run: Path, name: str) -> float:
    data = json.loads((run / name / "results.json").read_text())
    return next(iter(data["benchmarks"].values()))["avg_at_n"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the run folder of benchmarks/real_model_run.sh")
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    train = args.run / "train"
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    steps, reward = scalars(train, "train/reward")
    window = 4
    windows = [reward[max(0, i - window + 1) : i + 1] for i in range(len(reward))]
    smooth = [sum(w) / len(w) for w in windows]
    axes[0].plot(steps, reward, "o-", alpha=0.4, label="reward (8 completions)")
    axes[0].plot(steps, smooth, "-", lw=2, label=f"moving mean ({window} steps)")
    before, after = heldout(args.run, "eval-before"), heldout(args.run, "eval-after")
    axes[0].plot([0], [before], "s", color="k", label="held-out avg@2 before / after")
    axes[0].plot([steps[-1]], [after], "s", color="k")
    axes[0].set(xlabel="step", ylabel="accuracy", title="reward and held-out accuracy")
    axes[0].legend(fontsize=7)
    s, length = scalars(train, "train/completions/mean_length")
    axes[1].plot(s, length, "o-")
    axes[1].set(xlabel="step", ylabel="tokens", title="mean completion length (max 64)")
    s, ctx = scalars(train, "train/bicc/context_tokens")
    axes[2].plot(s, ctx, "o-", label="bicc/context_tokens")
    s, clip = scalars(train, "train/clip/frac")
    axes[2].plot(s, [100 * c for c in clip], "o-", label="clip/frac (%)")
    axes[2].set(xlabel="step", title="BiCC context and clipping")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
