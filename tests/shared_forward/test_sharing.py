"""The trainer's shared-prompt forward (``sharing.py``), checked against TRL's per-row one.

The override of TRL's ``_get_per_token_logps_and_entropies`` must give TRL's values
(log-probs and entropies, and their gradients) for the kinds of prompts the run
shares, and be TRL's own call for everything else.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
from trainer_utils import GROUP, make_config, make_trainer, save_tiny_model
from trl import GRPOTrainer

import contrastive_rlvr.shared_forward.sharing as sharing_module
from contrastive_rlvr.shared_forward.packed_prefix import SPLIT_ATTENTION
from contrastive_rlvr.shared_forward.sharing import PromptSharing


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def repeated_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Two groups of GROUP rows, each group one left-padded prompt (lengths 5 and 3), and
    right-padded completions of 6 tokens with a masked tail: TRL's (ids, mask, C)."""
    gen = torch.Generator().manual_seed(seed)
    prompts, masks = [], []
    for length in (5, 3):
        ids = torch.randint(4, 40, (length,), generator=gen).tolist()
        for _ in range(GROUP):
            prompts.append([0] * (5 - length) + ids)
            masks.append([0] * (5 - length) + [1] * length)
    completion = torch.randint(4, 40, (2 * GROUP, 6), generator=gen)
    cmask = torch.ones(2 * GROUP, 6, dtype=torch.long)
    cmask[1, 4:] = 0
    cmask[6, 2:] = 0
    ids = torch.cat([torch.tensor(prompts), completion], dim=1)
    mask = torch.cat([torch.tensor(masks), cmask], dim=1)
    return ids, mask, 6


def per_row(trainer, ids, mask, c, **kw):
    return GRPOTrainer._get_per_token_logps_and_entropies(
        trainer, trainer.model, ids, mask, c, **kw
    )


@pytest.mark.parametrize("checkpointing", [False, True])
def test_conditioned_prompts_share_with_trl_values_and_gradients(
    model_dir, tmp_path, checkpointing
):
    trainer = make_trainer(
        model_dir,
        make_config(
            tmp_path, bicc=True, bicc_form="conditioned", gradient_checkpointing=checkpointing
        ),
    )
    assert trainer.model.config._attn_implementation == SPLIT_ATTENTION
    assert trainer.prompt_sharing.prepare(trainer.model, "policy") == "packed"
    ids, mask, c = repeated_batch()
    valid = mask[:, -c:].bool()
    trainer.model.train()

    calls = []
    real_forward = sharing_module.packed_prefix_forward

    def counting(*args, **kwargs):
        calls.append(args[1].shape)
        return real_forward(*args, **kwargs)

    sharing_module.packed_prefix_forward = counting
    try:
        with trainer.prompt_sharing.prompts("conditioned"):
            logps, ent, aux = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, mask, c, compute_entropy=True
            )
    finally:
        sharing_module.packed_prefix_forward = real_forward
    assert len(calls) == 1 and aux is None  # the shared form ran, once for the micro-batch
    (logps[valid].sum() + ent[valid].sum()).backward()
    grads = [p.grad.clone() for p in trainer.model.parameters()]
    trainer.model.zero_grad()

    ref_logps, ref_ent, _ = per_row(trainer, ids, mask, c, compute_entropy=True)
    (ref_logps[valid].sum() + ref_ent[valid].sum()).backward()
    torch.testing.assert_close(logps[valid], ref_logps[valid], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent[valid], ref_ent[valid], atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, (p.grad for p in trainer.model.parameters()), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_plain_prompts_run_per_row_unless_asked(model_dir, tmp_path, monkeypatch):
    ids, mask, c = repeated_batch(1)
    trainer = make_trainer(model_dir, make_config(tmp_path, bicc=True, bicc_form="conditioned"))
    monkeypatch.setattr(sharing_module, "packed_prefix_forward", None)  # would raise if called
    with torch.no_grad():
        got = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, c)[0]
        want = per_row(trainer, ids, mask, c)[0]
    assert torch.equal(got, want)  # TRL's own call: bit for bit

    monkeypatch.undo()
    trainer = make_trainer(model_dir, make_config(tmp_path, share_plain_prompt=True))
    valid = mask[:, -c:].bool()
    with torch.no_grad():
        # Without gradient, TRL's chunking of the generation batch is kept (2 rows a chunk).
        got = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, c, batch_size=2)
        want = per_row(trainer, ids, mask, c)
    torch.testing.assert_close(got[0][valid], want[0][valid], atol=1e-5, rtol=1e-5)


def test_additions_off_leave_the_model_as_trl_built_it(model_dir, tmp_path):
    trainer = make_trainer(model_dir, make_config(tmp_path))
    assert not trainer.prompt_sharing.active
    assert trainer.model.config._attn_implementation == "sdpa"
    trainer = make_trainer(
        model_dir, make_config(tmp_path, bicc=True, bicc_form="conditioned", share_prefix=False)
    )
    assert trainer.model.config._attn_implementation == "sdpa"


def test_saved_checkpoint_loads_without_the_split_attention(model_dir, tmp_path):
    # The switch is a run-time setting: a checkpoint must load anywhere.
    from transformers import AutoModelForCausalLM

    trainer = make_trainer(model_dir, make_config(tmp_path, bicc=True, bicc_form="conditioned"))
    trainer.save_model(str(tmp_path / "saved"))
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert SPLIT_ATTENTION not in json.dumps(config)
    AutoModelForCausalLM.from_pretrained(tmp_path / "saved")


def test_fallbacks_are_chosen_and_logged(monkeypatch, caplog):
    monkeypatch.setattr(
        sharing_module, "supports_packed_prefix", lambda model: (False, "flash attention")
    )
    model = torch.nn.Linear(1, 1)
    with caplog.at_level(logging.INFO, logger=sharing_module.__name__):
        one = PromptSharing(
            conditioned=True, plain=False, gradient_checkpointing=False, num_processes=1
        )
        assert one.prepare(model, "policy") == "cache"
        ckpt = PromptSharing(
            conditioned=True, plain=False, gradient_checkpointing=True, num_processes=1
        )
        assert ckpt.prepare(model, "policy") is None
        ddp = PromptSharing(
            conditioned=True, plain=False, gradient_checkpointing=False, num_processes=2
        )
        assert ddp.prepare(model, "reference") is None
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "prompt sharing (policy): key/value-cache form, as flash attention"
    assert messages[1].startswith("prompt sharing (policy): per-row forward, as flash attention")
    assert messages[2].startswith("prompt sharing (reference): per-row forward")


def test_cache_form_runs_where_it_can_and_never_for_entropies(model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(sharing_module, "supports_packed_prefix", lambda model: (False, "test"))
    trainer = make_trainer(model_dir, make_config(tmp_path, bicc=True, bicc_form="conditioned"))
    assert trainer.model.config._attn_implementation == "sdpa"  # not switched
    ids, mask, c = repeated_batch(2)
    valid = mask[:, -c:].bool()
    sharing = trainer.prompt_sharing
    kw = dict(batch_size=None, compute_aux_loss=False, extra={})
    with torch.no_grad(), sharing.prompts("conditioned"):
        cached = sharing.forward(trainer.model, ids, mask, c, compute_entropy=False, **kw)
        assert sharing.forward(trainer.model, ids, mask, c, compute_entropy=True, **kw) is None
        want = per_row(trainer, ids, mask, c)[0]
    torch.testing.assert_close(cached[0][valid], want[valid], atol=1e-5, rtol=1e-5)
    with sharing.prompts("conditioned"):  # router loss and multimodal inputs: per row
        assert sharing.forward(
            trainer.model, ids, mask, c, batch_size=None, compute_entropy=False,
            compute_aux_loss=True, extra={},
        ) is None  # fmt: skip
        assert sharing.forward(
            trainer.model, ids, mask, c, batch_size=None, compute_entropy=False,
            compute_aux_loss=False, extra={"pixel_values": torch.zeros(1)},
        ) is None  # fmt: skip


def test_trl_routed_bicc_loss_is_unchanged_by_sharing(model_dir, tmp_path, monkeypatch):
    # The TRL loss with BiCC: one generation batch, the loss and gradients with the shared
    # forward and with TRL's per-row forward.
    trainer = make_trainer(
        model_dir, make_config(tmp_path, bicc=True, bicc_form="conditioned", bicc_mix=1.0)
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by TRL's training loop
    batch = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    assert trainer.loss.name == "grpo" and type(trainer.loss).__name__ == "TRLLoss"
    calls = []
    real_forward = sharing_module.packed_prefix_forward

    def counting(*args, **kwargs):
        calls.append(kwargs["entropy"])
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(sharing_module, "packed_prefix_forward", counting)
    results = []
    for share in (True, False):
        trainer.prompt_sharing.enabled["conditioned"] = share
        trainer.model.zero_grad()
        loss = trainer._compute_loss(trainer.model, batch)
        assert calls == [True]  # TRL's loss forward ran shared, with its entropies, once
        loss.backward()
        grads = [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]
        results.append((loss.detach(), grads))
    assert results[0][0].abs() > 0
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-5, rtol=1e-5)
    for got, want in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
