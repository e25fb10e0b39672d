"""BiCC's distill term and transfer measure (algorithms/bicc_transfer.py) against numbers
worked by hand, and the distill term against TRL's SDPO (trl.experimental.sdpo, trl 1.16)
where the two definitions meet: sampled-token reverse KL, the same teacher log-probs, the
same taught rows, SDPO's importance-weight clip."""

from __future__ import annotations

import math
import os
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
from trl.experimental.sdpo.sdpo_trainer import DistillationLogits, SDPOTrainer

from contrastive_rlvr.algorithms.bicc_transfer import (
    plain_grpo_surrogate,
    sampled_token_distill_loss,
    taught_rows,
    transfer_cosine,
)

LOGP = [[-1.0, -2.0], [-0.5, -3.0]]
TEACHER = torch.tensor([[-2.0, -1.0], [-1.0, -1.0]])
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
TAUGHT = torch.tensor([True, False])


def _distill(**options):
    logp = torch.tensor(LOGP, requires_grad=True)
    loss, metrics = sampled_token_distill_loss(logp, TEACHER, MASK, TAUGHT, **options)
    loss.backward()
    return float(loss.detach()), logp.grad, metrics


def test_distill_loss_worked_by_hand():
    # gap = logp - teacher = [[1, -1], .]; row 0: (1 x -1 + -1 x -2) / 2 = 0.5, row 1 not
    # taught: 0; mean over the 2 rows 0.25. d/dlogp = gap / (2 tokens x 2 rows).
    loss, grad, metrics = _distill()
    assert loss == pytest.approx(0.25)
    torch.testing.assert_close(grad, torch.tensor([[0.25, -0.25], [0.0, 0.0]]))
    assert float(metrics["distill_gap"]) == pytest.approx(0.0)  # -(1 + -1) / 2


def test_distill_importance_weight_is_clipped():
    # Token (0, 0) has pi / pi_old = 3, clipped to 2: row 0 = (2 x -1 + 2) / 2 = 0.
    old = torch.tensor(LOGP) - torch.tensor([[math.log(3.0), 0.0], [0.0, 0.0]])
    loss, grad, _ = _distill(old_logp=old, is_clip=2.0)
    assert loss == pytest.approx(0.0, abs=1e-7)
    torch.testing.assert_close(grad, torch.tensor([[0.5, -0.25], [0.0, 0.0]]))


def test_distill_max_gap_bounds_the_coefficient():
    # gaps clamped to +-0.5: row 0 = (0.5 x -1 + -0.5 x -2) / 2 = 0.25, loss 0.125.
    loss, grad, _ = _distill(max_gap=0.5)
    assert loss == pytest.approx(0.125)
    torch.testing.assert_close(grad, torch.tensor([[0.125, -0.125], [0.0, 0.0]]))


def test_taught_rows():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    conditioned = torch.tensor([True, True, False, True])
    assert taught_rows(rewards, conditioned, 0.5, "wrong").tolist() == [False, True, False, False]
    assert taught_rows(rewards, conditioned, 0.5, "both").tolist() == [True, True, False, True]
    with pytest.raises(ValueError, match="rows must be"):
        taught_rows(rewards, conditioned, 0.5, "right")


def test_transfer_cosine_by_hand():
    a = [torch.tensor([1.0, 0.0]), torch.tensor([0.0])]
    p = [torch.tensor([1.0, 1.0]), None]  # None: no gradient, counted 0
    assert transfer_cosine(a, p) == pytest.approx(1 / math.sqrt(2))
    assert transfer_cosine([torch.tensor([2.0, 0.0])], [torch.tensor([-1.0, 0.0])]) == -1.0
    assert math.isnan(transfer_cosine([torch.zeros(2)], [torch.ones(2)]))


def test_plain_grpo_surrogate_gradient():
    # d/dlogp = -A_i m_it / (|o_i| B): row 0 A = 2 over 2 tokens, row 1 A = -1 over 1 token.
    logp = torch.zeros(2, 2, requires_grad=True)
    plain_grpo_surrogate(logp, MASK, torch.tensor([2.0, -1.0])).backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.5, -0.5], [0.5, 0.0]]))


def _sdpo_stand_in(is_clip):
    logged = []
    return SimpleNamespace(
        args=SimpleNamespace(
            distillation_mode="sampled_token", distillation_alpha=1.0, distillation_is_clip=is_clip
        ),
        accelerator=SimpleNamespace(gather=lambda t: t),
        _metrics={"train": defaultdict(list)},
        _log_self_distillation_metric=lambda mode, value: logged.append(value),
    )


@pytest.mark.parametrize("is_clip", [None, 2.0])
def test_distill_term_equals_trl_sdpo(is_clip):
    """SDPO's ``_compute_self_distillation_loss`` on logits whose log-softmax gives the
    student's and the teacher's per-token log-probs; its ``self_distillation_mask`` is the
    project's taught rows. Equal losses and equal gradients with respect to the logits."""
    torch.manual_seed(0)
    rows, width, vocab = 4, 5, 7
    student = torch.randn(rows, width, vocab, requires_grad=True)
    teacher = torch.randn(rows, width, vocab)
    ids = torch.randint(vocab, (rows, width))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0]])
    taught = torch.tensor([True, False, True, True])
    old = torch.randn(rows, width) - 2.0  # off policy, so the clip acts

    inputs = {"old_per_token_logps": old}
    logits = DistillationLogits(
        completion_ids=ids,
        completion_mask=mask,
        loss_mask=mask * taught.long().unsqueeze(1),
        student_logits=student,
        teacher_logits=teacher,
    )
    model = SimpleNamespace(training=True)
    theirs = SDPOTrainer._compute_self_distillation_loss(
        _sdpo_stand_in(is_clip), model, inputs, logits
    )
    (their_grad,) = torch.autograd.grad(theirs, student)

    logp = torch.log_softmax(student, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    teacher_logp = torch.log_softmax(teacher, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    ours, _ = sampled_token_distill_loss(
        logp, teacher_logp, mask, taught, old_logp=old, is_clip=is_clip
    )
    (our_grad,) = torch.autograd.grad(ours, student)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-6)
    torch.testing.assert_close(our_grad, their_grad)


def test_distill_center_removes_the_rows_uniform_shift():
    # Row 0's gaps [1, -1] have mean 0: unchanged. A teacher lower by 3 on every token of
    # the row (gaps [4, 2]) centres to [1, -1] as well: the same loss and gradient.
    loss, grad, _ = _distill(center=True)
    shifted = torch.tensor(LOGP, requires_grad=True)
    teacher = TEACHER - torch.tensor([[3.0, 3.0], [0.0, 0.0]])
    moved, _ = sampled_token_distill_loss(shifted, teacher, MASK, TAUGHT, center=True)
    moved.backward()
    assert float(moved.detach()) == pytest.approx(loss) == pytest.approx(0.25)
    torch.testing.assert_close(shifted.grad, grad)
