"""BiCC's distill form and transfer measure in the trainer: the combined loss against TRL's
SDPO (same batch, teacher and weight), the transfer probe on models whose cosine is known
by construction, the config's refusals, and a tiny run that logs both."""

from __future__ import annotations

import logging
import math
import os
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
from trl.experimental.sdpo.sdpo_trainer import DistillationLogits, SDPOTrainer

from contrastive_rlvr.algorithms import get_recipe
from contrastive_rlvr.errors import UserError
from contrastive_rlvr.trainer import RLVRConfig
from contrastive_rlvr.trainer.loss import (
    Loss,
    LossContext,
    MixedLoss,
    PolicyLogps,
    _policy_objective,
    build_loss,
)
from contrastive_rlvr.trainer.loss.distill import DistillLoss
from contrastive_rlvr.trainer.loss.transfer import PATIENCE, TransferProbe
from tests.trainer_utils import make_config, make_trainer, save_tiny_model


def config(tmp_path, **fields) -> RLVRConfig:
    return RLVRConfig(
        output_dir=str(tmp_path), report_to="none", num_generations=4, max_completion_length=8,
        per_device_train_batch_size=4, beta=0.0, **fields,
    )  # fmt: skip


# ---------------------------------------------------------------- the combined loss vs SDPO


@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_distill_loss_equals_sdpo_on_the_same_batch(tmp_path, weight):
    """SDPO's ``compute_loss`` (policy loss 'grpo', sampled-token reverse KL, IS clip 2)
    with its teacher forward replaced by the given logits, against the project's GRPO loss
    wrapped in :class:`DistillLoss`, on the same student and teacher logits, rows taught and
    weight: equal losses and equal gradients."""
    torch.manual_seed(1)
    rows, width, vocab = 4, 3, 6
    student = torch.randn(rows, width, vocab, requires_grad=True)
    teacher = torch.randn(rows, width, vocab)
    ids = torch.randint(vocab, (rows, width))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    taught = torch.tensor([False, True, True, False])
    advantages = torch.tensor([1.0, -1.0, -0.5, 0.5])
    inputs = {
        "prompt_ids": torch.ones(rows, 2, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 2, dtype=torch.long),
        "completion_ids": ids,
        "completion_mask": mask,
        "advantages": advantages,
        "num_items_in_batch": mask.sum(),
    }

    stand_in = SimpleNamespace(
        args=SimpleNamespace(
            distillation_weight=weight, distillation_mode="sampled_token",
            distillation_alpha=1.0, distillation_is_clip=2.0,
        ),
        use_teacher_server=False, teacher_model=None, model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, importance_sampling_level="token",
        epsilon_low=0.2, epsilon_high=0.2, loss_type="grpo",
        accelerator=SimpleNamespace(gather=lambda t: t),
        _metrics={"train": defaultdict(list)},
        _log_self_distillation_metric=lambda mode, value: None,
        _forward_logits=lambda **kw: student,
    )  # fmt: skip
    stand_in._compute_teacher_student_logits = lambda model, teacher_model, batch: (
        DistillationLogits(ids, mask, mask * taught.long().unsqueeze(1), student, teacher)
    )
    stand_in._compute_policy_loss = lambda batch, logits: SDPOTrainer._compute_policy_loss(
        stand_in, batch, logits
    )
    stand_in._compute_self_distillation_loss = lambda model, batch, logits: (
        SDPOTrainer._compute_self_distillation_loss(stand_in, model, batch, logits)
    )
    theirs = SDPOTrainer.compute_loss(stand_in, stand_in.model, dict(inputs))
    (their_grad,) = torch.autograd.grad(theirs, student)

    def logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, **kw):
        return torch.log_softmax(student, -1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)

    cfg = config(tmp_path)
    base = Loss(PolicyLogps(conditioned=False), _policy_objective(cfg, get_recipe("grpo"), None))
    ours_loss = DistillLoss(base, weight=weight, is_clip=2.0, max_gap=None)
    teacher_logp = torch.log_softmax(teacher, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    ours, metrics = ours_loss(
        None,
        {**inputs, "bicc_teacher_logps": teacher_logp, "bicc_taught": taught},
        LossContext(logps=logps, group_size=4),
    )
    (our_grad,) = torch.autograd.grad(ours, student)
    assert float(ours.detach()) == pytest.approx(float(theirs.detach()), rel=1e-6, abs=1e-7)
    torch.testing.assert_close(our_grad, their_grad)
    assert "bicc/distill_gap" in metrics


def test_the_config_builds_the_distill_loss_on_the_plain_prompt(tmp_path):
    loss = build_loss(config(tmp_path, bicc=True, bicc_form="distill"), get_recipe("grpo"))
    assert isinstance(loss, DistillLoss) and not loss.logps.conditioned
    assert loss.weight == 0.1  # the field's default


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"bicc_mix": 0.5}, "bicc_mix"),
        ({"bicc_ratio_mode": "paper"}, "bicc_ratio_mode"),
        ({"bicc_distill_weight": 1.5}, "bicc_distill_weight"),
        ({"bicc_distill_is_clip": 0.0}, "bicc_distill_is_clip"),
    ],
)
def test_settings_the_distill_form_would_ignore_are_refused(tmp_path, fields, named):
    with pytest.raises(UserError, match=named):
        config(tmp_path, bicc=True, bicc_form="distill", **fields)


# ---------------------------------------------------------------- the transfer probe


class TwoHeads(torch.nn.Module):
    """A policy over a vocabulary of 5 that ignores the prompt's content: its logits are
    ``a`` on the plain prompt and ``b`` on the conditioned one (``b`` starts equal to
    ``a``). ``shared=True`` reads ``a`` for both: a model that ignores the context."""

    def __init__(self, shared: bool) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor([0.3, -0.2, 0.1, 0.0, 0.5]))
        self.b = torch.nn.Parameter(self.a.detach().clone())
        self.shared = shared

    def logps(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask, **kw):
        head = self.a if self.shared or not kw.get("share_prefix") else self.b
        return torch.log_softmax(head, -1)[completion_ids]


def _probe(tmp_path, *, shared: bool, mix: float) -> float:
    model = TwoHeads(shared)
    cfg = config(tmp_path)
    objective = _policy_objective(cfg, get_recipe("grpo"), None)
    loss_fn = (
        MixedLoss(objective, mix) if mix < 1 else Loss(PolicyLogps(conditioned=True), objective)
    )
    inputs = {
        "prompt_ids": torch.ones(4, 2, dtype=torch.long),
        "prompt_mask": torch.ones(4, 2, dtype=torch.long),
        "bicc_prompt_ids": torch.ones(4, 5, dtype=torch.long),
        "bicc_prompt_mask": torch.ones(4, 5, dtype=torch.long),
        "completion_ids": torch.tensor([[0, 1, 2], [3, 4, 0], [1, 1, 0], [2, 3, 4]]),
        "completion_mask": torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]]),
        "advantages": torch.tensor([1.0, -1.0, 0.5, -0.5]),
        "num_items_in_batch": torch.tensor(9.0),
    }
    ctx = LossContext(logps=model.logps, group_size=4)
    loss, _ = loss_fn(model, inputs, ctx)
    return TransferProbe(every=1, threshold=0.0).measure(model, loss, inputs, ctx, step=0)


def test_a_context_the_model_ignores_gives_the_plain_gradient(tmp_path):
    # pi(o | [q; O]) = pi(o | q): on policy BiCC's gradient is plain GRPO's exactly.
    assert _probe(tmp_path, shared=True, mix=1.0) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("mix", [1.0, 0.5, 0.25])
def test_a_context_read_by_other_weights_gives_the_mix_share(tmp_path, mix):
    # The conditioned gradient lives on b, the plain one on a (orthogonal, equal norms as
    # b starts equal to a): cos = (1 - m) / sqrt(m^2 + (1 - m)^2); 0 for the paper's m = 1.
    want = (1 - mix) / math.sqrt(mix**2 + (1 - mix) ** 2)
    assert _probe(tmp_path, shared=False, mix=mix) == pytest.approx(want, abs=1e-6)


def test_the_probe_warns_once_after_low_probes(caplog):
    probe = TransferProbe(every=2, threshold=0.2)
    assert [probe.due(s) for s in range(5)] == [True, False, True, False, True]
    with caplog.at_level(logging.WARNING):
        for value in [0.1, 0.05, float("nan"), 0.5, 0.1, 0.1, 0.1, 0.0]:
            probe._check(value)
    warnings = [r for r in caplog.records if "not reaching the policy" in r.getMessage()]
    assert len(warnings) == 1 and "--bicc_form distill" in warnings[0].getMessage()
    assert PATIENCE == 3
    # A distill run is told what to change in its own form.
    caplog.clear()
    probe = TransferProbe(every=1, threshold=0.2, distill=True)
    with caplog.at_level(logging.WARNING):
        for value in [0.0, 0.0, 0.0]:
            probe._check(value)
    assert "--bicc_distill_weight" in caplog.records[-1].getMessage()


# ---------------------------------------------------------------- a tiny run


def test_a_distill_run_logs_the_teacher_and_the_transfer(tmp_path, caplog):
    model_dir = save_tiny_model(tmp_path / "model")
    cfg = make_config(
        tmp_path, bicc=True, bicc_form="distill", bicc_distill_rows="both", max_steps=3,
        bicc_transfer_every=1, bicc_transfer_warn=1.01,  # every probe is "low": it warns
    )  # fmt: skip
    trainer = make_trainer(model_dir, cfg)
    with caplog.at_level(logging.WARNING):
        trainer.train()
    logs = [h for h in trainer.state.log_history if "bicc/transfer_cos" in h]
    assert len(logs) == 3 and all(-1.0 <= h["bicc/transfer_cos"] <= 1.0 for h in logs)
    assert all("bicc/distill_gap" in h and "bicc/taught_frac" in h for h in logs)
    assert any("not reaching the policy" in r.getMessage() for r in caplog.records)


def test_without_gradient_the_distill_loss_is_the_recipes(tmp_path):
    # Evaluation runs the loss under no_grad, where TRL's log-prob hook does not fire: the
    # eval loss is then the recipe's loss on the plain prompt, not an error.
    cfg = config(tmp_path)
    base = Loss(PolicyLogps(conditioned=False), _policy_objective(cfg, get_recipe("grpo"), None))

    class Silent(Loss):
        def __call__(self, model, inputs, ctx):
            return torch.tensor(0.25), {}

    silent = Silent(base.logps, base.objective)
    loss = DistillLoss(silent, weight=0.5, is_clip=None, max_gap=None)
    inputs = {"bicc_teacher_logps": torch.zeros(1, 1), "bicc_taught": torch.ones(1)}
    with torch.no_grad():
        out, _ = loss(None, inputs, LossContext(logps=None, group_size=1))
    assert float(out) == 0.25
    with pytest.raises(RuntimeError, match="made no plain forward"):
        loss(None, inputs, LossContext(logps=None, group_size=1))


def test_a_distill_option_with_the_paper_form_is_refused(tmp_path):
    # The paper's form reads none of the distill options: a value set away from its
    # default would be ignored, so it is refused in one line naming it.
    with pytest.raises(UserError, match="bicc_distill_weight=0.5 is invalid: is read only by"):
        config(tmp_path, bicc=True, bicc_form="conditioned", bicc_distill_weight=0.5)
    with pytest.raises(UserError, match="bicc_teacher='reference'"):
        config(tmp_path, bicc=True, bicc_ratio_mode="paper", bicc_teacher="reference")
    # at their defaults they are no setting at all
    assert config(tmp_path, bicc=True, bicc_form="conditioned").bicc_form == "conditioned"
