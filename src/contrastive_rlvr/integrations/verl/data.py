"""Prompt datasets in verl's RL parquet layout.

verl's ``RLHFDataset`` reads parquet rows with ``prompt`` (a list of chat
messages), ``data_source`` and ``reward_model.ground_truth``; its reward manager
passes ``data_source``, the completion text and ``ground_truth`` to the reward
function (:func:`.reward.compute_score`). This module writes any source that
:func:`contrastive_rlvr.data.load_prompts` reads (the TRL path's format) in that
layout, so both engines train on the same prompts and answers::

    python -m contrastive_rlvr.integrations.verl.data data/math_train.jsonl \\
        ~/data/math/train.parquet
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ...data import load_prompts

DATA_SOURCE = "contrastive_rlvr"


def verl_rows(examples: Iterable[Mapping[str, Any]], data_source: str) -> Iterator[dict]:
    """verl rows from ``{"id", "prompt", "answer"}`` examples; a string prompt becomes one
    user message, a message list is kept."""
    for ex in examples:
        prompt = ex["prompt"]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        yield {
            "data_source": data_source,
            "prompt": messages,
            "reward_model": {"style": "rule", "ground_truth": ex["answer"]},
            "extra_info": {"id": ex["id"]},
        }


def write_verl_parquet(source: str, out: str | Path, *, data_source: str = DATA_SOURCE) -> int:
    """Load ``source`` with :func:`load_prompts` and write it to ``out``; return the row count."""
    from datasets import Dataset

    examples = load_prompts(source).dataset
    rows = list(verl_rows(examples, data_source))
    out = Path(out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_list(rows).to_parquet(str(out))
    return len(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help=".jsonl/.json/.parquet file or Hugging Face dataset name")
    parser.add_argument("out", help="parquet file to write")
    parser.add_argument("--data-source", default=DATA_SOURCE, help="verl's data_source column")
    args = parser.parse_args(argv)
    count = write_verl_parquet(args.source, args.out, data_source=args.data_source)
    print(f"wrote {count} rows to {args.out}")


if __name__ == "__main__":
    main()
