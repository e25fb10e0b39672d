"""With ``beta > 0`` the reference forward of a scoring runs once: TRL's scoring computes
``ref_per_token_logps`` and the log-prob stage reuses that tensor (RCC's delta, the
delta diagnostics) instead of a second pass (issue 21 item 3). Counted on the reference
backbone's forward calls during one ``_generate_and_score_completions``."""

from __future__ import annotations

import pytest
import torch
from trainer_utils import make_config, make_trainer, save_tiny_model

import contrastive_rlvr.trainer.stages.logprobs as logprobs_module


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize(
    "fields",
    [
        {"beta": 0.04},
        {"beta": 0.04, "rcc": True, "rcc_reference": "reference"},
        # The conditioned KL reference (bicc_kl_reference's default) is a second forward on
        # a different input, the conditioned prompt; the plain one repeats nothing.
        {"beta": 0.04, "bicc": True, "bicc_ratio_mode": "paper", "bicc_kl_reference": "plain"},
        {"beta": 0.04, "log_delta": True},
    ],
    ids=["kl", "kl+rcc", "kl+bicc-paper", "kl+delta-log"],
)
def test_one_reference_forward_per_scoring(model_dir, tmp_path, fields):
    trainer = make_trainer(model_dir, make_config(tmp_path, **fields))
    calls: list[int] = []
    trainer.ref_model.model.register_forward_hook(lambda *args: calls.append(1))
    seen: list[torch.Tensor] = []
    stage = next(s for s in trainer.pipelines["train"].stages if s.name == "logprobs")
    real = logprobs_module.sequence_delta

    def spy(old, ref, mask, **kw):  # the reference the delta is taken against
        seen.append(ref)
        return real(old, ref, mask, **kw)

    logprobs_module.sequence_delta = spy
    try:
        rows = [trainer.train_dataset[i] for i in range(2) for _ in range(trainer.num_generations)]
        trainer.model.train()
        out = trainer._generate_and_score_completions(rows)
    finally:
        logprobs_module.sequence_delta = real
    assert stage.reference  # the stage needs log pi_ref for its delta ...
    assert len(calls) == 1  # ... and reads TRL's, made once in TRL's scoring
    assert seen and seen[0] is out["ref_per_token_logps"]
