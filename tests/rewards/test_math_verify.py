"""MathVerifyReward: verification cases, hostile answers, worker replacement, metrics.

One reward (two workers, timeout 1 s, no length cap so hostile strings reach
the verifier) is shared by the whole module: starting the pool is the
expensive part.
"""

import os
import pickle
import signal
import time

import pytest

from contrastive_rlvr.rewards import COUNTER_KEYS, MathVerifyReward
from contrastive_rlvr.rewards.pool import KILL_GRACE_S

TIMEOUT = 1


def wait_dead(pid: int) -> None:
    """Until ``pid`` is a zombie or gone, so the pool sees it dead (polls /proc)."""
    for _ in range(200):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[1][0] in "ZX":
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)


@pytest.fixture(scope="module")
def reward():
    r = MathVerifyReward(timeout=TIMEOUT, workers=2, max_answer_chars=None)
    yield r
    r.close()


def boxed(s: str) -> str:
    return "so the final answer is \\boxed{" + s + "}."


@pytest.mark.parametrize(
    ("gold", "completion", "expected"),
    [
        # fractions and decimals are the same number
        ("\\frac{1}{2}", boxed("0.5"), 1.0),
        ("0.5", boxed("\\frac12"), 1.0),
        ("\\frac{14}{3}", boxed("14/3"), 1.0),
        ("\\frac{1}{3}", boxed("0.5"), 0.0),
        # LaTeX thousands separator
        ("1000", boxed("1{,}000"), 1.0),
        ("1,000", boxed("1000"), 1.0),
        # sets are unordered
        ("\\{1,2\\}", boxed("\\{2, 1\\}"), 1.0),
        ("\\{1,2\\}", boxed("\\{1, 3\\}"), 0.0),
        # multiple choice written as \text{(C)}
        ("\\text{(C)}", boxed("C"), 1.0),
        ("\\text{(C)}", boxed("\\text{(C)}"), 1.0),
        ("\\text{(C)}", boxed("D"), 0.0),
        # tags touching the number
        ("70", "<answer>70</answer>", 1.0),
        ("70", "<answer>71</answer>", 0.0),
        # float gold as stored in amc23 (27.0), int gold as in aime25
        (27.0, boxed("27"), 1.0),
        (588, "<answer>588</answer>", 1.0),
        ("(3, \\frac{\\pi}{2})", boxed("\\left( 3, \\frac{\\pi}{2} \\right)"), 1.0),
        ("\\sqrt{2}/2", boxed("\\frac{\\sqrt{2}}{2}"), 1.0),
        # other Unicode spellings of the same number (full-width, Arabic-Indic,
        # Devanagari digits, a zero-width space inside the number)...
        ("12", boxed("\uff11\uff12"), 1.0),
        ("12", boxed("\u0661\u0662"), 1.0),
        ("12", boxed("\u0967\u0968"), 1.0),
        ("12", boxed("1\u200b2"), 1.0),
        ("12", "<answer>\u200e\u0661\u0662\u200f</answer>", 1.0),
        ("12.5", boxed("\uff11\uff12\uff0e\uff15"), 1.0),
        ("\\frac{1}{2}", boxed("\uff11\uff0f\uff12"), 1.0),
        ("\uff11\uff12", boxed("12"), 1.0),  # a full-width gold
        # ... and still a different number when it is one
        ("12", boxed("\u0661\u0663"), 0.0),
        ("12", boxed("\uff11\uff13"), 0.0),
        # no answer at all
        ("5", "I think it is 5", 0.0),
    ],
)
def test_verification_cases(reward, gold, completion, expected):
    assert reward(["p"], [completion], answer=[gold]) == [expected]


def test_batch_order_and_chat_completions(reward):
    completions = [
        [{"role": "assistant", "content": boxed("4")}],
        [{"role": "assistant", "content": boxed("5")}],
        boxed("4"),
        "nothing",
    ]
    assert reward(None, completions, answer=["4", "4", "4", "4"]) == [1.0, 0.0, 1.0, 0.0]


def test_last_number_fallback():
    # Extraction happens before the pool: a reward that never calls it needs no workers.
    r = MathVerifyReward(timeout=1, workers=1, last_number_fallback=True)
    assert r.extract("3 + 4 = 7 apples") == "7"
    assert MathVerifyReward(timeout=1, workers=1).extract("3 + 4 = 7") is None


def test_too_long_answers_skip_the_verifier():
    r = MathVerifyReward(timeout=1, workers=1, max_answer_chars=10)
    scores = r.score([boxed("1" * 11)], ["1" * 11])
    assert [(s.reward, s.status) for s in scores] == [(0.0, "too_long")]
    assert r.stats()["reward/too_long"] == 1.0
    assert r.worker_pids == []  # never started


HOSTILE = {
    "tower": "9^{9^{9^9}}",
    "factorial": "(10^{10})!",
    "100kB": "1+" * 50_000 + "1",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_answer_scores_zero_within_timeout(reward, name):
    before = reward.stats()
    start = time.monotonic()
    out = reward(None, [boxed(HOSTILE[name])], answer=["5"])
    elapsed = time.monotonic() - start
    assert out == [0.0]
    # The bound: timeout + 1 s per hostile answer, never a stall.
    assert elapsed < TIMEOUT + 1.0, f"{name} took {elapsed:.2f} s"
    after = reward.stats()
    stopped = sum(after[k] - before[k] for k in ("reward/timeouts", "reward/killed"))
    unparsed = after["reward/unparsable"] - before["reward/unparsable"]
    assert stopped + unparsed == 1


def test_hostile_batch_does_not_block_good_answers(reward):
    completions = [boxed(h) for h in HOSTILE.values()] + [boxed("5"), boxed("6")]
    start = time.monotonic()
    out = reward(None, completions, answer=["5"] * 5)
    elapsed = time.monotonic() - start
    assert out == [0.0, 0.0, 0.0, 1.0, 0.0]
    # 3 slow answers over 2 workers: two rounds of at most timeout + grace each.
    assert elapsed < 2 * (TIMEOUT + KILL_GRACE_S) + 1.0


def test_killed_worker_is_replaced(reward):
    reward([None], [boxed("1")], answer=["1"])  # make sure the pool runs
    pids = reward.worker_pids
    before = reward.stats()
    os.kill(pids[0], signal.SIGKILL)
    wait_dead(pids[0])
    assert reward(None, [boxed("2"), boxed("3")], answer=["2", "3"]) == [1.0, 1.0]
    after = reward.stats()
    assert after["reward/worker_crashes"] - before["reward/worker_crashes"] == 1
    assert after["reward/worker_restarts"] - before["reward/worker_restarts"] == 1
    new_pids = reward.worker_pids
    assert pids[0] not in new_pids and pids[1] in new_pids


def test_hung_worker_is_killed_at_the_deadline(reward):
    reward([None], [boxed("1"), boxed("2")], answer=["1", "2"])
    pids = reward.worker_pids
    before = reward.stats()
    # A stopped process never answers, like one stuck in uninterruptible C code.
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    start = time.monotonic()
    out = reward(None, [boxed("7")], answer=["7"])
    elapsed = time.monotonic() - start
    assert out == [0.0]
    assert elapsed < TIMEOUT + 1.0
    after = reward.stats()
    assert after["reward/killed"] - before["reward/killed"] == 1
    counters = reward.counters()
    assert counters["verifier/killed"] == after["reward/killed"]  # never reset: the same count
    assert counters["verifier/worker_restarts"] == after["reward/worker_restarts"]
    # The stopped worker that got no task is still stopped: replace it too by
    # sending two answers, one of which lands on it and is killed.
    out = reward(None, [boxed("7"), boxed("8")], answer=["7", "8"])
    assert sorted(out) == [0.0, 1.0]
    assert reward(None, [boxed("7"), boxed("8")], answer=["7", "8"]) == [1.0, 1.0]
    assert set(reward.worker_pids).isdisjoint(pids)


def test_interrupted_call_leaves_no_stale_replies(monkeypatch):
    with MathVerifyReward(timeout=2, workers=1) as r:
        pool = r._pool

        def interrupt(results):
            raise KeyboardInterrupt

        with monkeypatch.context() as m:
            m.setattr(pool, "_collect", interrupt)
            with pytest.raises(KeyboardInterrupt):
                r(None, [boxed("1")], answer=["1"])  # sent to the worker, then interrupted
        # The worker's late "correct" for that answer must not become this call's result.
        assert r(None, [boxed("2")], answer=["3"]) == [0.0]
        assert pool.events["interrupted"] == 1


def test_stats_count_every_completion():
    with MathVerifyReward(timeout=2, workers=1) as r:
        r(None, [boxed("1"), boxed("1"), boxed("2"), "none", boxed("\\text{}")], answer=["1"] * 5)
        s = r.stats()
        # two correct (checked once: duplicates are shared), one wrong, one with
        # no answer, one that math-verify cannot parse
        assert s["reward/answers"] == 5
        assert s["reward/correct"] == 2
        assert s["reward/wrong"] == 1
        assert s["reward/no_answer"] == 1
        assert s["reward/unparsable"] == 1
        r(None, [boxed("9^{9^{9^9}}")], answer=["1"])  # stopped by the alarm or killed
        counters = r.counters()
        assert sorted(counters) == sorted(COUNTER_KEYS)
        assert counters["verifier/timeouts"] + counters["verifier/killed"] == 1
        r.reset_stats()
        assert r.stats()["reward/answers"] == 0
        assert r.counters() == counters  # cumulative for the whole run: not reset
    assert r.worker_pids == []  # closed by the with block


def test_trl_compatibility_name_pickle_and_errors(reward):
    assert reward.__name__ == "math_verify"
    # GRPOTrainer passes these keywords plus every dataset column.
    out = reward(
        prompts=["p"], completions=[boxed("2")], completion_ids=[[1, 2]], trainer_state=None,
        answer=["2"], id=["x"],
    )  # fmt: skip
    assert out == [1.0]
    copy = pickle.loads(pickle.dumps(reward))
    assert copy.timeout == TIMEOUT and copy.worker_pids == []
    with pytest.raises(ValueError, match="'answer' column"):
        reward(["p"], [boxed("1")])
    with pytest.raises(ValueError, match="1 completions but 2 gold"):
        reward(["p"], [boxed("1")], answer=["1", "2"])
    with pytest.raises(ValueError, match="whole number of seconds"):
        MathVerifyReward(timeout=0)


def test_a_dapo_answer_line_is_verified_and_can_be_turned_off(reward):
    # DAPO-Math-17k's format: the last line "Answer: $Answer", checked by math-verify
    completions = ["3 + 4 = 7.\nAnswer: 7", "So half.\n**Answer:** $\\frac{1}{2}$",
                   "Answer: 6\nNo:\nAnswer: 8", "Answer:"]  # fmt: skip
    assert reward(["p"] * 4, completions, answer=["7", "0.5", "6", "7"]) == [1.0, 1.0, 0.0, 0.0]
    assert [s.status for s in reward.score(completions[2:], ["6", "7"])] == ["wrong", "no_answer"]
    with MathVerifyReward(timeout=TIMEOUT, workers=1, answer_line=False) as off:
        assert off.extract(completions[0]) is None
        copy = pickle.loads(pickle.dumps(off))
        assert copy.answer_line is False and copy.extract(completions[0]) is None
        assert off(["p"], [completions[0]], answer=["7"]) == [0.0]
