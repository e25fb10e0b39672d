"""The verifier pool against a maintained process pool (pebble, forkserver context).

Should MathVerifyReward's hand-written pool (rewards/pool.py) give way to pebble's
``ProcessPool``? Three things decide it, each measured here in one run, arms interleaved:

1. start-up: the first call (worker start + imports + one check) and the replacement of
   a worker killed with SIGKILL (median over --kills), per arm;
2. the deadline: an answer whose check never returns (the worker is stopped with
   SIGSTOP, as a check stuck in C code looks from outside) must come back within the
   deadline as a status, and the pool must go on;
3. the main-module guarantee: a user's training script with no ``if __name__ ==
   "__main__":`` guard must work (multiprocessing's forkserver and spawn re-import
   the main module in every worker; the project's pool never does).

Needs `pip install pebble` (not a dependency of the package). Results: docs/reliability.md.

Usage: python benchmarks/verifier_pool_vs_pebble.py [--kills 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool

try:
    import pebble
except ModuleNotFoundError:  # the benchmark's own dependency: --help works without it
    pebble = None
from verifier_startup import wait_dead  # this folder's script

from contrastive_rlvr.rewards import MathVerifyReward
from contrastive_rlvr.rewards.verify_worker import check_answer

TIMEOUT_S = 2


def _pebble_check(gold: str, pred: str) -> str:
    return check_answer(gold, pred, TIMEOUT_S, {})


def _pebble_worker_pid(pool: pebble.ProcessPool) -> int:
    return pool.schedule(os.getpid).result()


def pebble_arm(kills: int) -> dict[str, float | str]:
    ctx = multiprocessing.get_context("forkserver")
    replace: list[float] = []
    broken = ""
    with pebble.ProcessPool(max_workers=1, context=ctx) as pool:
        started = time.perf_counter()
        assert pool.schedule(_pebble_check, args=("0.5", "1/2")).result() == "correct"
        first = time.perf_counter() - started
        try:
            for _ in range(kills):
                pid = _pebble_worker_pid(pool)
                os.kill(pid, signal.SIGKILL)
                wait_dead(pid)
                started = time.perf_counter()
                while True:  # a job sent to the dead worker before its replacement is lost
                    try:
                        future = pool.schedule(_pebble_check, args=("3", "3"), timeout=30)
                        result = future.result()
                        break
                    except pebble.ProcessExpired:
                        continue
                assert result == "correct"
                replace.append(time.perf_counter() - started)
        except BrokenProcessPool as err:
            broken = f"pool broken after SIGKILL of its worker: {err}"
    # the deadline, on a fresh pool: the worker stopped (SIGSTOP) while it holds the answer
    with pebble.ProcessPool(max_workers=1, context=ctx) as pool:
        pid = _pebble_worker_pid(pool)
        future = pool.schedule(_pebble_check, args=("3", "3"), timeout=TIMEOUT_S + 0.5)
        os.kill(pid, signal.SIGSTOP)
        started = time.perf_counter()
        try:  # pebble's own timeout should answer by TIMEOUT_S + 0.5; give it 10 s more
            outcome = future.result(timeout=TIMEOUT_S + 10.5)
        except pebble.ProcessExpired as err:
            outcome = f"ProcessExpired ({err})"
        except FutureTimeout:
            if future.done():
                outcome = "TimeoutError (pebble's deadline)"
            else:
                outcome = f"no answer after {TIMEOUT_S + 10.5:.1f} s: the pool waits on the worker"
                os.kill(pid, signal.SIGKILL)  # SIGTERM stays pending on a stopped process
        waited = time.perf_counter() - started
        try:
            after = pool.schedule(_pebble_check, args=("2", "2")).result(timeout=60)
        except Exception as err:
            after = f"{type(err).__name__}"
    return {"first": first, "replace": statistics.median(replace) if replace else float("nan"),
            "deadline_wait": waited, "deadline_outcome": outcome, "after": after,
            "broken": broken}  # fmt: skip


def project_arm(kills: int) -> dict[str, float | str]:
    with MathVerifyReward(timeout=TIMEOUT_S, workers=1) as reward:
        started = time.perf_counter()
        assert reward(None, ["\\boxed{1/2}"], answer=["0.5"]) == [1.0]
        first = time.perf_counter() - started
        replace = []
        for _ in range(kills):
            pid = reward.worker_pids[0]
            os.kill(pid, signal.SIGKILL)
            wait_dead(pid)
            started = time.perf_counter()
            assert reward(None, ["\\boxed{3}"], answer=["3"]) == [1.0]
            replace.append(time.perf_counter() - started)
        pid = reward.worker_pids[0]
        # the deadline: SIGSTOP the worker just before the answer reaches it
        os.kill(pid, signal.SIGSTOP)
        started = time.perf_counter()
        scores = reward(None, ["\\boxed{3}"], answer=["3"])
        waited = time.perf_counter() - started
        outcome = f"score {scores[0]}, killed={reward.counters().get('killed', 0)}"
        after = reward(None, ["\\boxed{2}"], answer=["2"])
    return {"first": first, "replace": statistics.median(replace), "deadline_wait": waited,
            "deadline_outcome": outcome, "after": str(after), "broken": ""}  # fmt: skip


UNGUARDED = {
    "pebble": """
        import multiprocessing, pebble
        from contrastive_rlvr.rewards.verify_worker import check_answer
        def check(g, p):
            return check_answer(g, p, 2, {})
        ctx = multiprocessing.get_context("forkserver")
        with pebble.ProcessPool(max_workers=1, context=ctx) as pool:
            print("RESULT", pool.schedule(check, args=("3", "3")).result(timeout=60))
    """,
    "project": """
        from contrastive_rlvr.rewards import MathVerifyReward
        with MathVerifyReward(timeout=2, workers=1) as reward:
            print("RESULT", reward(None, ["\\\\boxed{3}"], answer=["3"]))
    """,
}


def unguarded_script(arm: str) -> str:
    """Run a script with no main guard that verifies one answer; what it printed."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "train_no_guard.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(UNGUARDED[arm]))
        try:
            done = subprocess.run([sys.executable, path], capture_output=True, text=True,
                                  timeout=120, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            return "hung (killed after 120 s)"
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT")]
    if done.returncode == 0 and lines:
        return f"works ({lines[0]})"
    last = (done.stderr.strip().splitlines() or ["?"])[-1]
    return f"fails (exit {done.returncode}: {last[:120]})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of both arms")
    args = ap.parse_args()
    if pebble is None:
        sys.exit("this benchmark needs pebble: pip install pebble (not a package dependency)")
    results: dict[str, list[dict]] = {"project": [], "pebble": []}
    for _ in range(args.rounds):
        results["project"].append(project_arm(args.kills))
        results["pebble"].append(pebble_arm(args.kills))
    for arm, runs in results.items():
        first = statistics.median(r["first"] for r in runs)
        replace = statistics.median(r["replace"] for r in runs)
        wait_s = max(r["deadline_wait"] for r in runs)
        print(f"{arm:8s} first call {first:.3f} s, replacement {replace:.3f} s (median), "
              f"stuck worker answered in {wait_s:.2f} s ({runs[-1]['deadline_outcome']}), "
              f"next call {runs[-1]['after']}")  # fmt: skip
        for broken in sorted({r["broken"] for r in runs if r["broken"]}):
            print(f"{arm:8s} {broken}")
    p, q = (statistics.median(r["replace"] for r in results[a]) for a in ("pebble", "project"))
    print(f"replacement ratio pebble / project: {p / q:.2f} (nan: pebble never replaced one)")
    for arm in ("project", "pebble"):
        print(f"{arm:8s} script without a main guard: {unguarded_script(arm)}")


if __name__ == "__main__":
    main()
