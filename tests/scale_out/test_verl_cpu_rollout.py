"""The test-side rollout server of :mod:`verl_cpu`, without Ray.

The real-worker test (tests/scale_out/test_verl_real_workers.py) reads "the weights reached
the rollout" off the agreement of the rollout's and the actor's log-probs; that
reading holds only if a server that was never synced disagrees and one that was
agrees exactly. Checked here on the tiny Llama in float32. Needs verl (.venv-verl).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

pytest.importorskip("verl")

import torch
import verl_cpu

from contrastive_rlvr.embedded import build_char_tokenizer, build_tiny_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, seed=3).eval()
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model, tokenizer


def server(path, tokenizer, load_format):
    config = SimpleNamespace(
        load_format=load_format, seed=0, max_model_len=None, prompt_length=16, response_length=8
    )
    model_config = SimpleNamespace(local_path=str(path), tokenizer=tokenizer)
    return verl_cpu.HFServer(config, model_config, replica_rank=0)


def actor_logprobs(model, prompt, tokens):
    """log_softmax(logits / 1) of each sampled token, teacher-forced: (len(tokens),)."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), -1)
    return torch.stack([logp[len(prompt) - 1 + i, t] for i, t in enumerate(tokens)])


def sample(srv, prompt):
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    out = asyncio.run(srv.generate(prompt_ids=prompt, sampling_params=params, request_id="r"))
    assert 1 <= len(out.token_ids) <= 8  # response_length caps it
    return out


def test_a_dummy_server_disagrees_until_synced_then_matches_the_actor(saved):
    path, model, tokenizer = saved
    prompt = tokenizer("3+4+5=")["input_ids"]
    srv = server(path, tokenizer, "dummy")
    before = sample(srv, prompt)
    gap = (torch.tensor(before.log_probs) - actor_logprobs(model, prompt, before.token_ids)).abs()
    assert gap.max() > 0.05  # random weights: not the actor's distribution

    # what the worker's adapter sends: the actor's weights by HF name (tied head omitted)
    named = {k: v.clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    assert srv.load_weights(named, global_steps=1) == len(named)
    after = sample(srv, prompt)
    expected = actor_logprobs(model, prompt, after.token_ids)
    assert torch.allclose(torch.tensor(after.log_probs), expected, atol=1e-5)
    assert after.extra_fields["global_steps"] == 1


def test_a_sync_missing_a_weight_is_refused(saved):
    path, model, tokenizer = saved
    srv = server(path, tokenizer, "auto")
    named = {k: v for k, v in model.state_dict().items() if "layers.0.mlp" not in k}
    with pytest.raises(KeyError, match="no weights for"):
        srv.load_weights(named, global_steps=None)
