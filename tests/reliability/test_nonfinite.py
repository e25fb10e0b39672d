"""Non-finite numbers: rewards that return inf/NaN or strings, updates that make the weights
non-finite (rolled back and counted), a run in which every update was lost (exit non-zero),
and counters in metrics.jsonl equal to summary.json's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from contrastive_rlvr.cli import app
from contrastive_rlvr.errors import (
    NonFiniteParametersError,
    NonFiniteRewardError,
    RewardTypeError,
)
from contrastive_rlvr.run import train
from contrastive_rlvr.trainer.callbacks import MetricsJsonl
from contrastive_rlvr.trainer.parse import parse_config
from contrastive_rlvr.trainer.reward_guards import check_rewards, guard_reward
from contrastive_rlvr.trainer.update_guards import NonFiniteUpdateGuard

COMPLETIONS = ["a", "b", "c"]


def const(values):
    def reward_fn(prompts, completions, **kwargs):
        return list(values)

    return reward_fn


# ---------------------------------------------------------------------- the reward wrapper


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_nonfinite_reward_names_function_and_row(bad):
    fn = guard_reward(const([1.0, bad, 0.0]))
    with pytest.raises(
        NonFiniteRewardError, match=r"'reward_fn' returned (inf|-inf|nan) for row 1"
    ):
        fn(["p"] * 3, COMPLETIONS)


def test_strings_and_other_types_name_the_function():
    with pytest.raises(RewardTypeError, match=r"'reward_fn' returned str '1\.0' for row 2"):
        guard_reward(const([1.0, 0.0, "1.0"]))(["p"] * 3, COMPLETIONS)
    with pytest.raises(RewardTypeError, match="'reward_fn' returned a str"):
        guard_reward(lambda prompts, completions, **k: "1.0", name="reward_fn")(
            ["p"] * 3, COMPLETIONS
        )
    with pytest.raises(RewardTypeError, match="returned 2 values for 3 completions"):
        guard_reward(const([1.0, 0.0]))(["p"] * 3, COMPLETIONS)
    with pytest.raises(RewardTypeError, match="returned dict"):
        guard_reward(const([1.0, {}, 0.0]))(["p"] * 3, COMPLETIONS)


def test_numbers_none_and_arrays_pass():
    out = guard_reward(const([True, None, np.float32(0.5)]))(["p"] * 3, COMPLETIONS)
    assert out == [1.0, None, 0.5]
    out = guard_reward(lambda prompts, completions, **k: torch.tensor([1.0, 0.0, 2.0]))(
        ["p"] * 3, COMPLETIONS
    )
    assert out == [1.0, 0.0, 2.0]
    fn = guard_reward(const([1.0, math.nan, 0.0]), on_nonfinite="skip_group")
    assert fn(["p"] * 3, COMPLETIONS) == [1.0, math.inf, 0.0] and fn.nonfinite == 1
    assert fn.__name__ == "reward_fn"


# ---------------------------------------------------------------------- the tensor check


def test_check_rewards_error_and_skip_group_by_hand():
    nan, inf = math.nan, math.inf
    # B = 6 rows, G = 3 (groups rows 0-2 and 3-5), two functions a and b.
    per_func = torch.tensor(
        [[1.0, nan], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, inf], [0.0, 0.0]]
    )
    with pytest.raises(NonFiniteRewardError, match=r"'b' .* row 4 \(group 1, completion 1\)"):
        check_rewards(per_func, ["a", "b"], group_size=3)
    result = check_rewards(per_func, ["a", "b"], group_size=3, on_nonfinite="skip_group")
    assert result.skipped_rows.tolist() == [False, False, False, True, True, True]
    assert result.skipped_groups == 1
    assert result.rewards[3:].eq(0).all()  # the skipped group's rows
    assert torch.isnan(result.rewards[0, 1])  # NaN is TRL's "not scored": left alone
    assert result.rewards[:3, 0].tolist() == [1.0, 0.0, 1.0]
    clean = check_rewards(per_func[:3], ["a", "b"], group_size=3)
    assert clean.skipped_groups == 0 and not clean.skipped_rows.any()


# ---------------------------------------------------------------------- the update guard


def _step(model, optimizer, guard):
    loss = model(torch.full((1, 4), 10.0)).sum()  # d loss / d weight = 10 everywhere
    loss.backward()
    guard.on_pre_optimizer_step(None, None, None, model=model, optimizer=optimizer)
    optimizer.step()
    guard.on_optimizer_step(None, None, None, optimizer=optimizer)
    optimizer.zero_grad()


def _set_lr(optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def test_update_guard_rolls_back_a_step_that_makes_weights_nonfinite():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    guard = NonFiniteUpdateGuard()
    _step(model, optimizer, guard)  # an ordinary step: kept
    assert guard.rolled_back == 0
    weights = [p.detach().clone() for p in model.parameters()]
    momentum = optimizer.state[model.weight]["momentum_buffer"].clone()
    # The next update is lr * (0.9 * m + 10) > 1e38 * 10: float32 overflows (max 3.4e38),
    # from a finite gradient.
    _set_lr(optimizer, 1e38)
    _step(model, optimizer, guard)
    assert guard.rolled_back == 1
    for p, w in zip(model.parameters(), weights, strict=True):
        assert torch.equal(p, w)
    assert torch.equal(optimizer.state[model.weight]["momentum_buffer"], momentum)
    _set_lr(optimizer, 1e-2)
    _step(model, optimizer, guard)
    assert guard.rolled_back == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_update_guard_undoes_the_first_step_of_a_fresh_optimizer():
    model = torch.nn.Linear(4, 2)
    weights = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1e38, momentum=0.9)
    guard = NonFiniteUpdateGuard()
    _step(model, optimizer, guard)
    assert guard.rolled_back == 1 and len(optimizer.state) == 0
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights, strict=True))


def test_update_guard_without_room_for_a_copy_stops_the_run():
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e38)
    with pytest.raises(NonFiniteParametersError, match="too large for the rollback copy"):
        _step(model, optimizer, NonFiniteUpdateGuard(max_snapshot_bytes=0))


def test_metrics_counters_are_read_after_the_step(tmp_path):
    callback = MetricsJsonl(tmp_path, counters=lambda: {"loss/skipped_updates_total": 3})

    class State:
        global_step, is_world_process_zero = 7, True

    logs = {"reward": 0.5, "loss/skipped_updates_total": 2.0}  # as logged at loss time
    callback.on_log(None, State(), None, logs=logs)
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert row == {"step": 7, "reward": 0.5, "loss/skipped_updates_total": 3}


# ---------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory) -> Path:
    """The embedded warm start (mixed groups, so updates are not zero)."""
    from contrastive_rlvr.run.command import load_run_inputs

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("warm")
    load_run_inputs(parse_config(None, ["--embedded_sft_steps", "200"]), out)
    return out / "sft-model"


def test_huge_learning_rate_every_update_rolled_back_exits_nonzero(warm_start, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(warm_start, out / "sft-model")
    args = [
        "train", "--output_dir", str(out), "--max_steps", "3", "--learning_rate", "1e39",
        "--eval_n", "1", "--eval_limit", "2", "--num_generations", "4",
        "--per_device_train_batch_size", "8", "--save_strategy", "no",
        "--diagnostics_every", "0", "--deltas_every", "0",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "error: every one of the 3 optimizer steps was skipped" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["rolled_back_updates"] == 3
    assert "learned nothing" in summary["error"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # the counter of each line includes that line's own step: no lag behind summary.json
    assert [r["guard/rolled_back_total"] for r in rows] == [1, 2, 3]
    assert rows[-1]["loss/skipped_updates_total"] == summary["skipped_updates"]
    assert all(math.isfinite(r["reward"]) for r in rows)  # sampling never saw inf weights


def test_inf_reward_stops_the_run_naming_the_function(tmp_path):
    from trainer_utils import save_tiny_model

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+1=", "answer": "1"}) + "\n"
                            for i in range(12)))  # fmt: skip
    reward = tmp_path / "r.py"
    reward.write_text(
        "def blows_up(prompts, completions, **kwargs):\n"
        "    return [float('inf')] + [0.0] * (len(completions) - 1)\n"
    )
    config = parse_config(None, [
        "--model", str(save_tiny_model(tmp_path / "m")), "--dataset", str(data),
        "--rewards", f"{reward}:blows_up", "--heldout_size", "2", "--eval_n", "1",
        "--eval_limit", "1", "--max_steps", "2", "--num_generations", "4",
        "--per_device_train_batch_size", "8", "--max_completion_length", "4",
        "--output_dir", str(tmp_path / "o"), "--bicc", "false", "--rcc", "false",
        "--diagnostics_every", "0", "--deltas_every", "0", "--save_strategy", "no",
    ])  # fmt: skip
    with pytest.raises(NonFiniteRewardError, match=r"'blows_up' returned inf for row 0"):
        train(config, progress=False)
    assert not (tmp_path / "o" / "summary.json").exists()


# ---------------------------------------------------------------------- skip_group, wired


def _first_group_inf(prompts, completions, **kwargs):
    """inf for every row of the batch's first prompt (its group), 1, 0, 1, 0, ... on the
    others' (mixed groups, so they have advantages)."""
    return [math.inf if p == prompts[0] else float(i % 2 == 0) for i, p in enumerate(prompts)]


def test_skip_group_trains_and_the_skipped_rows_carry_no_gradient(tmp_path):
    from trainer_utils import GROUP, make_config, make_trainer, save_tiny_model

    torch.manual_seed(0)
    config = make_config(
        tmp_path, nonfinite_rewards="skip_group", log_delta=False, diagnostics_every=0,
        deltas_every=0, recipe="dr_grpo",
    )  # fmt: skip
    trainer = make_trainer(save_tiny_model(tmp_path / "m"), config, reward=_first_group_inf)
    trainer.train()
    assert trainer.state.global_step == 2
    logged = [h for h in trainer.state.log_history if "reward/skipped_groups" in h]
    assert [h["reward/skipped_groups"] for h in logged] == [1.0, 1.0]  # one group per step
    # The last generation batch, before the group shuffle: rows 0..G-1 are the skipped group.
    batch = trainer.last_generation_batch
    assert batch["completion_mask"][:GROUP].sum() == 0
    assert batch["completion_mask"][GROUP:].sum() > 0
    assert batch["advantages"][:GROUP].tolist() == [0.0] * GROUP
    # Dr.GRPO: A = R - group mean = +-0.5 on the other group's 1, 0, 1, 0.
    assert batch["advantages"][GROUP:].tolist() == [0.5, -0.5, 0.5, -0.5]
    assert batch["num_items_in_batch"].item() == batch["completion_mask"][GROUP:].sum().item()

    # No gradient from the skipped rows: scrambling their prompts and completions leaves
    # the gradient of the loss exactly as it was (and it is not zero: the others train).
    def grads(inputs):
        trainer.model.train()
        trainer.model.zero_grad()
        trainer.compute_loss(trainer.model, inputs).backward()
        return [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]

    before = grads(batch)
    scrambled = dict(batch)
    for key in ("completion_ids", "prompt_ids"):
        ids = batch[key].clone()
        ids[:GROUP] = torch.randint(1, 20, ids[:GROUP].shape)
        scrambled[key] = ids
    after = grads(scrambled)
    assert any(g.abs().sum() > 0 for g in before)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def _custom_run(tmp_path, reward_src: str, *extra: str):
    from trainer_utils import save_tiny_model

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+1=", "answer": "1"}) + "\n"
                            for i in range(12)))  # fmt: skip
    reward = tmp_path / "r.py"
    reward.write_text(reward_src)
    return parse_config(None, [
        "--model", str(save_tiny_model(tmp_path / "m")), "--dataset", str(data),
        "--rewards", f"{reward}:blows_up", "--heldout_size", "2", "--eval_n", "1",
        "--eval_limit", "1", "--max_steps", "2", "--num_generations", "4",
        "--per_device_train_batch_size", "8", "--max_completion_length", "4",
        "--output_dir", str(tmp_path / "o"), "--bicc", "false", "--rcc", "false",
        "--diagnostics_every", "0", "--deltas_every", "0", "--save_strategy", "no",
        *extra,
    ])  # fmt: skip


# inf on row 5 of every training batch (TRL passes trainer_state; the held-out
# evaluation does not, so it scores finite).
TRAIN_INF = (
    "import math\n"
    "def blows_up(prompts, completions, trainer_state=None, **kwargs):\n"
    "    bad = 5 if trainer_state is not None else -1\n"
    "    return [math.inf if i == bad else 0.0 for i in range(len(completions))]\n"
)


def test_run_with_skip_group_counts_the_skipped_group_every_step(tmp_path):
    summary = train(_custom_run(tmp_path, TRAIN_INF, "--nonfinite_rewards", "skip_group"),
                    progress=False)  # fmt: skip
    assert summary["steps"] == 2
    rows = [json.loads(x) for x in (tmp_path / "o" / "metrics.jsonl").read_text().splitlines()]
    assert [r["reward/skipped_groups"] for r in rows] == [1.0, 1.0]  # row 5: group 1 of 2
    assert all(math.isfinite(r["reward"]) for r in rows)


def test_run_with_the_default_stops_at_the_training_batch_naming_function_and_row(tmp_path):
    with pytest.raises(NonFiniteRewardError, match=r"'blows_up' returned inf for row 5"):
        train(_custom_run(tmp_path, TRAIN_INF), progress=False)
    assert not (tmp_path / "o" / "summary.json").exists()


def test_guarded_reward_is_called_by_keyword_as_trl_calls_it():
    # TRL passes prompts=, completions=, ... by keyword; a reward that names only
    # `completions` (as TRL's own examples do) must keep working once guarded.
    from contrastive_rlvr.trainer.reward_guards import guard_reward

    def length_reward(completions, **kwargs):
        return [float(len(c)) for c in completions]

    guarded = guard_reward(length_reward)
    assert guarded(prompts=["p", "q"], completions=["ab", "abc"], completion_ids=None) == [2.0, 3.0]
