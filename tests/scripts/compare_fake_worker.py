"""A stand-in for compare's child process (``python -m contrastive_rlvr.compare ...``):
the same :func:`~contrastive_rlvr.compare.child_main` (the parent-death signal), then a
worker that trains nothing, so that compare's process handling is tested in seconds.

- ``warm-start DIR ...``: writes ``DIR/sft-model/config.json``;
- ``train ... --output_dir D ...``: locks D as ``train`` does, writes its pid to
  ``D/pid`` and a line to its log every 0.2 s until the file named by
  ``$FAKE_RELEASE`` exists, then writes ``D/summary.json`` and exits 0.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

from contrastive_rlvr.compare import child_main


def fake_worker(argv: list[str]) -> None:
    if argv[0] == "warm-start":
        sft = Path(argv[1]) / "sft-model"
        sft.mkdir(parents=True, exist_ok=True)
        (sft / "config.json").write_text("{}")
        return
    out = Path(argv[argv.index("--output_dir") + 1])
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as train() holds its folder
    (out / "pid").write_text(str(os.getpid()))
    release = os.environ.get("FAKE_RELEASE", "")
    while not (release and Path(release).exists()):
        print("training step", flush=True)
        time.sleep(0.2)
    summary = {"heldout_avg@n_before": 0.5, "heldout_avg@n_after": 0.6, "eval_n": 1}
    (out / "summary.json").write_text(json.dumps(summary))


if __name__ == "__main__":
    child_main(sys.argv[1:], worker=fake_worker)
