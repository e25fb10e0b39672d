"""Start-up time and memory of MathVerifyReward's verifier workers.

For each start method, prints the verifier server's start-up (``forkserver``
only), the first worker's start, the start of replacements (a worker is
killed with SIGKILL and the next call replaces it; median and max over
--kills), and the memory of one worker from /proc (RSS; PSS, its share of
pages it shares with the server; USS, the pages only it holds).

--heavy imports torch and transformers first, as a training script does:
the numbers should not change, since no worker imports this script.

Usage: python benchmarks/verifier_startup.py [--kills 10] [--heavy]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time

from contrastive_rlvr.rewards import MathVerifyReward


def memory_mb(pid: int) -> dict[str, float]:
    """RSS, PSS and USS of ``pid`` in MB (Linux /proc/<pid>/smaps_rollup)."""
    fields: dict[str, float] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) / 1024
    uss = fields.get("Private_Clean", 0.0) + fields.get("Private_Dirty", 0.0)
    return {"rss": fields.get("Rss", 0.0), "pss": fields.get("Pss", 0.0), "uss": uss}


def wait_dead(pid: int) -> None:
    """Until ``pid`` is a zombie or gone (polls /proc)."""
    for _ in range(500):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[1][0] in "ZX":
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)


def measure(start_method: str, kills: int) -> None:
    with MathVerifyReward(timeout=2, workers=1, start_method=start_method) as reward:
        started = time.perf_counter()
        assert reward(None, ["\\boxed{1/2}"], answer=["0.5"]) == [1.0]
        first_call = time.perf_counter() - started
        server = reward._pool.server_start_seconds
        mem = memory_mb(reward.worker_pids[0])
        for _ in range(kills):
            pid = reward.worker_pids[0]
            os.kill(pid, signal.SIGKILL)
            wait_dead(pid)
            assert reward(None, ["\\boxed{3}"], answer=["3"]) == [1.0]
        starts = reward.worker_start_seconds
        counters = reward.counters()
    replacements = starts[1:]
    print(f"start_method={start_method}")
    if server is not None:
        print(f"  verifier server start:  {server:.3f} s")
    print(f"  first worker start:     {starts[0]:.3f} s   (first call in all {first_call:.3f} s)")
    if replacements:
        print(
            f"  replacement start:      median {statistics.median(replacements):.3f} s, "
            f"max {max(replacements):.3f} s over {len(replacements)} kills"
        )
    print(f"  worker memory:          RSS {mem['rss']:.0f} MB, PSS {mem['pss']:.0f} MB, "
          f"USS {mem['uss']:.0f} MB")  # fmt: skip
    print(f"  counters:               {counters}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kills", type=int, default=10, help="workers killed and replaced")
    ap.add_argument("--heavy", action="store_true", help="import torch and transformers first")
    ap.add_argument("--spawn-kills", type=int, default=3, help="kills for start_method=spawn")
    args = ap.parse_args()
    if args.heavy:
        import torch  # noqa: F401
        import transformers  # noqa: F401

        parent = memory_mb(os.getpid())
        print(f"this process after importing torch and transformers: RSS {parent['rss']:.0f} MB")
    measure("forkserver", args.kills)
    measure("spawn", args.spawn_kills)


if __name__ == "__main__":
    main()
