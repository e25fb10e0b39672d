"""The verifier pool from every way a user starts Python, and its start-up failures.

Each entry-point case runs a script in a fresh interpreter, the way a user
would: the script records its own import in a marker file (one line per
process that imports it), scores answers, kills its verifier worker and
scores again (so a replacement starts), then prints what it saw. The pool
must work and the marker must hold the script's own pid only: no worker
ever imports the user's ``__main__`` (multiprocessing's workers did, which
broke every case below except ``-c``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_math_verify import wait_dead

from contrastive_rlvr.rewards import MathVerifyReward
from contrastive_rlvr.rewards import pool as pool_module

# Runs whenever the script's module is imported (or run): one line per process.
MARKER = textwrap.dedent(
    """
    import os
    with open(os.environ["MARKER"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    """
)
# Top-level code, no main guard: what a notebook cell or a quick script does.
BODY = textwrap.dedent(
    """
    import json, os, signal, time
    from contrastive_rlvr.rewards import MathVerifyReward

    def wait_dead(pid):
        for _ in range(500):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split(") ")[1][0] in "ZX":
                        return
            except FileNotFoundError:
                return
            time.sleep(0.01)

    reward = MathVerifyReward(timeout=2, workers=1)
    first = reward(None, ["\\\\boxed{12}", "\\\\boxed{13}"], answer=["12", "12"])
    old_pid = reward.worker_pids[0]
    os.kill(old_pid, signal.SIGKILL)
    wait_dead(old_pid)
    second = reward(None, ["\\\\boxed{\\\\frac{1}{2}}"], answer=["0.5"])
    print("RESULT", json.dumps({
        "pid": os.getpid(),
        "first": first,
        "second": second,
        "replaced": reward.worker_pids[0] != old_pid,
        # getattr: so that older versions fail on the checks above, not here
        "start_seconds": getattr(reward, "worker_start_seconds", None),
        "counters": getattr(reward, "counters", dict)(),
    }))
    reward.close()
    """
)
SCRIPT = MARKER + BODY


def run_python(args: list[str], cwd: Path, *, stdin: str | None = None) -> dict:
    """Run ``args`` (after the interpreter) in ``cwd``; the script's RESULT and marker lines."""
    marker = cwd / "imported.txt"
    env = dict(os.environ, MARKER=str(marker))
    # The child finds this checkout's package as the test process did.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"exit code {proc.returncode}\nstdout:\n{proc.stdout[-2000:]}\n"
        f"stderr:\n{proc.stderr[-3000:]}"
    )
    result = json.loads(lines[-1][len("RESULT ") :])
    result["imports"] = marker.read_text().split()
    return result


def check_result(result: dict) -> None:
    assert result["first"] == [1.0, 0.0]
    assert result["second"] == [1.0]  # scored by the replacement worker
    assert result["replaced"]
    # Only the user's process imported the script: neither the verifier
    # server nor a worker (first or replacement) re-ran it.
    assert result["imports"] == [str(result["pid"])]
    # Start-up of the first worker and of its replacement, each measured.
    starts = result["start_seconds"]
    assert starts is not None and len(starts) == 2 and all(s > 0 for s in starts)
    assert result["counters"]["verifier/worker_restarts"] == 1.0
    assert result["counters"]["verifier/worker_crashes"] == 1.0


def test_unguarded_script(tmp_path):
    (tmp_path / "train_script.py").write_text(SCRIPT)
    check_result(run_python(["train_script.py"], tmp_path))


def test_guarded_script(tmp_path):
    guarded = MARKER + "def main():\n" + textwrap.indent(BODY, "    ") + "\n"
    guarded += 'if __name__ == "__main__":\n    main()\n'
    (tmp_path / "guarded.py").write_text(guarded)
    check_result(run_python(["guarded.py"], tmp_path))


def test_module_run_with_dash_m(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "job.py").write_text(SCRIPT)
    check_result(run_python(["-m", "mypkg.job"], tmp_path))


def test_script_from_standard_input(tmp_path):
    # Nothing imports a file here, so the marker shows the parent only.
    check_result(run_python(["-"], tmp_path, stdin=SCRIPT))


def test_run_path_as_ipython_run_does(tmp_path):
    # IPython's %run (and notebooks' runners) execute a file as __main__ in
    # an existing interpreter, like runpy.run_path.
    (tmp_path / "cell.py").write_text(SCRIPT)
    code = "import runpy; runpy.run_path('cell.py', run_name='__main__')"
    check_result(run_python(["-c", code], tmp_path))


def test_dash_c(tmp_path):
    check_result(run_python(["-c", SCRIPT], tmp_path))


TORCHRUN = Path(sys.executable).with_name("torchrun")


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun not installed next to python")
def test_torchrun_script(tmp_path):
    (tmp_path / "train_script.py").write_text(SCRIPT)
    args = [str(TORCHRUN), "--nproc_per_node", "1", "train_script.py"]
    # torchrun is a Python script: run it with this interpreter.
    check_result(run_python(args, tmp_path))


# ---------------------------------------------------------------- start-up failures


def test_server_start_failure_names_the_cause(tmp_path, monkeypatch):
    # A math_verify that cannot be imported, first on the path the children get.
    (tmp_path / "math_verify.py").write_text(
        "raise ImportError('simulated: math_verify is broken in this environment')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reward = MathVerifyReward(timeout=1, workers=1)
    with pytest.raises(RuntimeError) as err:
        reward(None, ["\\boxed{1}"], answer=["1"])
    message = str(err.value)
    first_line = message.splitlines()[0]
    assert "the verifier server" in first_line and "exit code 1" in first_line
    # The child's own last stderr line, not a guess about the cause.
    assert first_line.endswith("ImportError: simulated: math_verify is broken in this environment")
    assert "Traceback" in message  # the stderr tail follows
    reward.close()


def test_dead_server_is_restarted_and_counted():
    with MathVerifyReward(timeout=2, workers=2) as reward:
        assert reward(None, ["\\boxed{1}", "\\boxed{2}"], answer=["1", "2"]) == [1.0, 1.0]
        server = reward._pool._procs.launcher.process
        old_pids = reward.worker_pids
        os.kill(server.pid, signal.SIGKILL)
        server.wait()
        # The workers die with their server (SIGKILL on the parent's death);
        # the next call finds them dead and replaces both from a new server.
        assert reward(None, ["\\boxed{3}", "\\boxed{4}"], answer=["3", "4"]) == [1.0, 1.0]
        counters = reward.counters()
        assert counters["verifier/server_restarts"] == 1.0
        assert counters["verifier/worker_crashes"] == 2.0
        assert set(reward.worker_pids).isdisjoint(old_pids)


def test_spawn_start_method_scores_and_replaces():
    with MathVerifyReward(timeout=2, workers=1, start_method="spawn") as reward:
        assert reward(None, ["\\boxed{5}"], answer=["5"]) == [1.0]
        pid = reward.worker_pids[0]
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid)
        assert reward(None, ["\\boxed{6}"], answer=["6"]) == [1.0]
        assert reward.worker_pids[0] != pid
        assert reward.counters()["verifier/worker_restarts"] == 1.0
    with pytest.raises(ValueError, match=r"start_method must be one of \('forkserver', 'spawn'\)"):
        MathVerifyReward(start_method="fork")


def test_stopped_server_is_replaced(monkeypatch):
    # A server that stops answering (here: SIGSTOP) is killed after
    # _REQUEST_S and a new one started; the call still gets its answer.
    monkeypatch.setattr(pool_module, "_REQUEST_S", 1.0)
    with MathVerifyReward(timeout=2, workers=1) as reward:
        assert reward(None, ["\\boxed{1}"], answer=["1"]) == [1.0]
        server = reward._pool._procs.launcher.process
        os.kill(server.pid, signal.SIGSTOP)
        worker = reward.worker_pids[0]
        os.kill(worker, signal.SIGKILL)
        wait_dead(worker)
        assert reward(None, ["\\boxed{2}"], answer=["2"]) == [1.0]
        assert server.poll() == -signal.SIGKILL
        assert reward._pool._procs.launcher.process.pid != server.pid
        counters = reward.counters()
        assert counters["verifier/server_restarts"] == 1.0
        assert counters["verifier/worker_crashes"] == 1.0


def test_server_failing_twice_is_an_error(monkeypatch):
    # A server that dies at every request (e.g. fork fails for lack of memory):
    # one new server is tried, then the call fails saying so.
    class DyingServer:
        def __init__(self, timeout, log):
            self.dead, self.start_seconds = False, 0.0

        def alive(self):
            return not self.dead

        def spawn(self):
            self.dead = True
            raise pool_module.ServerGone("the verifier server died (exit code -11)")

        def reap(self, pid):
            return "unknown"

        def close(self):
            pass

    monkeypatch.setattr(pool_module, "_ForkServer", DyingServer)
    reward = MathVerifyReward(timeout=1, workers=1)
    with pytest.raises(RuntimeError, match=r"died \(exit code -11\), twice in a row"):
        reward(None, ["\\boxed{1}"], answer=["1"])
    assert reward._pool.events["server_restarts"] == 1
    reward.close()


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] in "ZX"
    except FileNotFoundError:
        return True


def test_no_verifier_outlives_a_killed_parent(tmp_path):
    # The training process is SIGKILLed (no exit handlers run) while a worker
    # is busy on a hostile answer: the server sees end of file on its control
    # socket and kills its workers, the busy one included.
    script = textwrap.dedent(
        """
        import collections, time
        from contrastive_rlvr.rewards import MathVerifyReward
        r = MathVerifyReward(timeout=60, workers=2, max_answer_chars=None)
        r(None, ["\\\\boxed{1}"], answer=["1"])
        pool = r._pool
        # Hand a worker a hostile answer (up to 60 s of sympy), then wait to be killed.
        pool._dispatch([("1", "(10^{10})!")], collections.deque([0]))
        print(pool._procs.launcher.process.pid, *pool.pids, flush=True)
        time.sleep(120)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env
    )
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 3, "the script did not start its pool"
    proc.kill()
    proc.wait()
    for _ in range(1000):  # bounded poll, no timing asserted
        if all(_dead(pid) for pid in pids):
            break
        time.sleep(0.01)
    assert [pid for pid in pids if not _dead(pid)] == []
