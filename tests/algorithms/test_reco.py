"""ReCo: occurrence weights, the variance factor and the loss, against hand-worked values."""

from __future__ import annotations

import math

import pytest
import torch

from contrastive_rlvr.algorithms import (
    completion_keys,
    distinct_share,
    expected_occurrence_weights,
    occurrence_weights,
    policy_loss,
    variance_factor,
)
from contrastive_rlvr.algorithms.reco import FACTORS, RESPONSE_WEIGHTS, entropy_factor

torch.set_num_threads(1)
LOUD = 37.0  # in masked cells: a masking bug shows


def close(actual: torch.Tensor, expected, **kw) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, **kw)


def test_occurrence_weights_inverse_count_within_each_group():
    keys = ["a", "b", "a", "c", "x", "x", "x", "y"]
    w = occurrence_weights(keys, 4)
    # group 0: "a" twice -> 1/2 each, "b" and "c" once; group 1: "x" three times -> 1/3
    close(w, [0.5, 1, 0.5, 1, 1 / 3, 1 / 3, 1 / 3, 1])
    # the same key in another group does not count: "a" in group 1 would weigh 1
    close(occurrence_weights(["a", "b", "a", "c"], 2), [1, 1, 1, 1])
    # each group's weights sum to its distinct responses: (3 + 2) / 2 groups / G=4
    close(distinct_share(w, 4), (3 / 4 + 2 / 4) / 2)
    with pytest.raises(ValueError, match="does not divide"):
        occurrence_weights(["a", "b", "c"], 2)


def test_completion_keys_ignore_padding():
    ids = torch.tensor([[5, 6, 0], [5, 6, 9], [5, 7, 9]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0]])
    keys = completion_keys(ids, mask)
    assert keys == [(5, 6), (5, 6), (5, 7)]
    close(occurrence_weights(keys + [(1,)], 2), [0.5, 0.5, 1, 1])


def test_expected_occurrence_weights():
    old = torch.log(torch.tensor([[0.5, 0.5], [0.5, 1.0], [0.01, 0.5], [0.9, 0.9]]))
    mask = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]])
    old[3, 1] = LOUD  # padding
    w = expected_occurrence_weights(old, mask, 4)
    # pi_old(o): 0.25, 0.5, 0.005, 0.9; G * pi = 1, 2, 0.02, 3.6 -> 1 / max(1, G pi)
    close(w, [1.0, 0.5, 1.0, 1 / 3.6])


def test_variance_factor_on_hand_made_probabilities():
    p = torch.tensor([[0.5, 0.9, 0.99, 0.1, 0.3]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    logp = torch.log(p)
    logp[0, 4] = LOUD
    # p(1-p) = 0.25, 0.09, 0.0099, 0.09; "max" divides by 1/4
    close(variance_factor(logp, mask, factor_norm="max"), [[1.0, 0.36, 0.0396, 0.36, 0.0]])
    # "mean" divides by the mean over real tokens: 0.4399 / 4 = 0.109975
    z = 0.4399 / 4
    close(
        variance_factor(logp, mask),
        [[0.25 / z, 0.09 / z, 0.0099 / z, 0.09 / z, 0.0]],
        rtol=1e-5,
        atol=1e-6,
    )
    # a normaliser from the whole batch replaces this batch's mean
    close(variance_factor(logp, mask, variance_mean=0.5), [[0.5, 0.18, 0.0198, 0.18, 0.0]])
    with pytest.raises(ValueError, match="unknown factor_norm"):
        variance_factor(logp, mask, factor_norm="entropy")


def _two_rows():
    logp = torch.log(torch.tensor([[0.5, 0.9], [0.5, 0.3]])).requires_grad_()
    mask = torch.tensor([[1, 1], [1, 0]])
    return logp, mask


def test_reco_loss_value_and_gradient_by_hand():
    logp, mask = _two_rows()
    with torch.no_grad():
        old = logp.clone()  # on-policy: ratio 1, the trust-region gate keeps every token
        old[1, 1] = LOUD
    adv = torch.tensor([1.0, -2.0])
    weights = torch.tensor([1.0, 0.5])
    loss, metrics = policy_loss("reco", logp, old, adv, mask, weights=weights, factor_norm="max")
    # f = 4 p (1 - p): row 0 (1, 0.36), row 1 (1). Terms -w f A:
    # row 0: (-1, -0.36), token mean -0.68; row 1: -(0.5 * 1 * -2) = 1.0.
    # seq-mean-token-mean over the weighted row count 1 + 0.5 = 1.5: (-0.68 + 1.0) / 1.5.
    close(loss, 0.32 / 1.5)
    loss.backward()
    # d/dlogp = -w f A / (|o_i| * 1.5): f is a stop-gradient factor, only exp(l - sg l) moves
    close(logp.grad, [[-1 / 3, -0.36 / 3], [1.0 / 1.5, 0.0]])
    close(metrics["reco/distinct_frac"], 0.75)
    close(metrics["reco/saturated_frac"], 0.0)
    close(metrics["reco/variance_mean"], (0.25 + 0.09 + 0.25) / 3)


def test_reco_loss_token_mean_uses_the_weighted_token_count():
    logp, mask = _two_rows()
    adv = torch.tensor([[1.0, 1.0], [-2.0, LOUD]])
    loss, _ = policy_loss(
        "reco",
        logp,
        logp.detach(),
        adv,
        mask,
        weights=torch.tensor([1.0, 0.5]),
        factor_norm="max",
        agg="token-mean",
    )
    # terms -1, -0.36, +1.0 over sum_i w_i |o_i| = 1*2 + 0.5*1 = 2.5 tokens
    close(loss, (-1 - 0.36 + 1.0) / 2.5)


def test_reco_trust_region_gate():
    logp = torch.log(torch.tensor([[0.6, 0.6, 0.2, 0.2]])).requires_grad_()
    old = torch.log(torch.tensor([[0.4, 0.4, 0.4, 0.4]]))
    mask = torch.ones(1, 4)
    # ratios 1.5, 1.5, 0.5, 0.5 with advantages +1, -1, -1, +1 (clip 0.2):
    # gated (no gradient): ratio 1.5 with A > 0 and ratio 0.5 with A < 0.
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0]])
    loss, metrics = policy_loss("reco", logp, old, adv, mask, factor_norm="max")
    loss.backward()
    f06, f02 = 4 * 0.6 * 0.4, 4 * 0.2 * 0.8
    close(logp.grad, [[0.0, f06 / 4, 0.0, -f02 / 4]])
    close(metrics["clip/frac"], 0.5)


def test_reco_mean_factor_averages_one_and_micro_batches_add_up():
    torch.manual_seed(0)
    logp = torch.log_softmax(torch.randn(4, 6, 5), -1)[..., 0].requires_grad_()
    mask = torch.ones(4, 6)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    weights = torch.tensor([1.0, 0.5, 0.5, 1.0])
    f = variance_factor(logp, mask)
    close((f * mask).sum() / mask.sum(), 1.0)
    full, _ = policy_loss("reco", logp, logp.detach(), adv, mask, weights=weights)
    # Micro-batches of 2 rows with the whole batch's normalisers give the same loss.
    p = torch.exp(logp.detach())
    z = ((p * (1 - p)) * mask).sum() / mask.sum()
    parts = [
        policy_loss(
            "reco",
            logp[s],
            logp.detach()[s],
            adv[s],
            mask[s],
            weights=weights[s],
            variance_mean=z,
            num_rows=weights.sum(),
        )[0]
        for s in (slice(0, 2), slice(2, 4))
    ]
    close(parts[0] + parts[1], full)


def test_reco_loss_kl_needs_reference():
    logp, mask = _two_rows()
    with pytest.raises(ValueError, match="needs ref_logp"):
        policy_loss("reco", logp, logp.detach(), torch.ones(2), mask, beta=0.1)
    ref = logp.detach() - math.log(2.0)
    _, metrics = policy_loss(
        "reco", logp, logp.detach(), torch.ones(2), mask, ref_logp=ref, beta=0.1
    )
    # k3 with l_ref - l = -log 2: exp(-log 2) + log 2 - 1 = 0.5 + 0.693147 - 1
    close(metrics["kl/mean"], 0.5 + math.log(2.0) - 1)


# ----------------------------------------------------------------------------- options of issue 14


def test_entropy_factor_by_hand():
    # Entropies (nats) of three real positions and one padded one (loud).
    h = torch.tensor([[0.2, 1.0, 0.0, LOUD], [0.6, LOUD, LOUD, LOUD]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    # "mean": Z = (0.2 + 1.0 + 0.0 + 0.6) / 4 = 0.45
    z = 0.45
    close(entropy_factor(h, mask), [[0.2 / z, 1.0 / z, 0.0, 0.0], [0.6 / z, 0, 0, 0]])
    # the batch's normaliser replaces this micro-batch's mean
    close(entropy_factor(h, mask, factor_mean=0.5), [[0.4, 2.0, 0.0, 0.0], [1.2, 0, 0, 0]])
    # "max": Z = log V; V = 4 -> log 4
    m = math.log(4)
    close(
        entropy_factor(h, mask, factor_norm="max", vocab_size=4),
        [[0.2 / m, 1.0 / m, 0.0, 0.0], [0.6 / m, 0, 0, 0]],
    )
    with pytest.raises(ValueError, match="pass vocab_size >= 2, got None"):
        entropy_factor(h, mask, factor_norm="max")


def test_entropy_factor_does_not_vanish_for_a_rare_sampled_token():
    # One position, distribution (0.5, 0.49, 0.01); the rare token (0.01) was sampled.
    # p(1-p) = 0.0099 (vanishes), H = -(.5 ln .5 + .49 ln .49 + .01 ln .01) stays large.
    dist = torch.tensor([0.5, 0.49, 0.01])
    h = -(dist * dist.log()).sum()
    mask = torch.ones(1, 1)
    close(variance_factor(torch.log(torch.tensor([[0.01]])), mask, factor_norm="max"), [[0.0396]])
    expected = (0.5 * math.log(2) - 0.49 * math.log(0.49) - 0.01 * math.log(0.01)) / math.log(3)
    close(entropy_factor(h.reshape(1, 1), mask, factor_norm="max", vocab_size=3), [[expected]])
    assert expected > 0.6


def test_reco_loss_with_the_entropy_factor_value_and_gradient_by_hand():
    logp, mask = _two_rows()
    entropy = torch.tensor([[0.5, 1.5], [1.0, LOUD]])
    adv = torch.tensor([1.0, -2.0])
    weights = torch.tensor([1.0, 0.5])
    loss, metrics = policy_loss(
        "reco",
        logp,
        logp.detach(),
        adv,
        mask,
        weights=weights,
        factor="entropy",
        entropy=entropy,
    )
    # "mean": Z = (0.5 + 1.5 + 1.0) / 3 = 1 -> f = H. Terms -w f A:
    # row 0: (-0.5, -1.5), token mean -1.0; row 1: -(0.5 * 1.0 * -2) = 1.0.
    # seq-mean-token-mean over the weighted row count 1.5: (-1.0 + 1.0) / 1.5 = 0.
    close(loss, 0.0)
    loss.backward()
    # gradient -w f A / (|o_i| * 1.5)
    close(logp.grad, [[-0.5 / 3, -1.5 / 3], [1.0 / 1.5, 0.0]])
    close(metrics["reco/entropy_mean"], 1.0)
    close(metrics["reco/factor_max"], 1.5)


def test_reco_loss_factor_options_are_checked():
    logp, mask = _two_rows()
    adv = torch.tensor([1.0, -2.0])
    with pytest.raises(ValueError, match="factor='entropy' needs entropy"):
        policy_loss("reco", logp, logp.detach(), adv, mask, factor="entropy")
    with pytest.raises(ValueError, match="entropy is only used with factor='entropy'"):
        policy_loss("reco", logp, logp.detach(), adv, mask, entropy=torch.ones(2, 2))
    with pytest.raises(ValueError, match="unknown ReCo factor 'ratio'; valid: variance, entropy"):
        policy_loss("reco", logp, logp.detach(), adv, mask, factor="ratio")
    assert FACTORS == ("variance", "entropy") and RESPONSE_WEIGHTS == ("count", "expected")


def test_expected_weights_in_the_loss_down_weight_a_likely_response_seen_once():
    # G = 4, one group: row 0 has pi_old = 0.5 (expected 2 copies in 4), sampled once;
    # rows 1-3 are rare. Count weights: all 1 (every response distinct). Expected
    # weights: (1/2, 1, 1, 1): row 0 counts as half a response.
    old = torch.log(torch.tensor([[0.5], [0.01], [0.02], [0.03]]))
    mask = torch.ones(4, 1)
    keys = completion_keys(torch.tensor([[1], [2], [3], [4]]), mask)
    close(occurrence_weights(keys, 4), [1.0, 1.0, 1.0, 1.0])
    w = expected_occurrence_weights(old, mask, 4)
    close(w, [0.5, 1.0, 1.0, 1.0])
    logp = old.clone().requires_grad_()
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    loss, metrics = policy_loss("reco", logp, old, adv, mask, weights=w, factor_norm="max")
    # f = 4 p (1 - p) = 4 * (.25, .0099, .0196, .0291) = (1, .0396, .0784, .1164);
    # terms -w f A = (-.5, .0396, .0784, -.1164), over sum w = 3.5 rows
    close(loss, (-0.5 + 0.0396 + 0.0784 - 0.1164) / 3.5, rtol=1e-5, atol=1e-6)
    close(metrics["reco/distinct_frac"], 3.5 / 4)


def test_expected_weights_need_only_each_rows_own_probability():
    # Three rows of a G = 4 group (e.g. one process's share): w = 1 / max(1, 4 pi_old)
    old = torch.log(torch.tensor([[0.5], [0.1], [0.25]]))
    close(expected_occurrence_weights(old, torch.ones(3, 1), 4), [0.5, 1.0, 1.0])
    with pytest.raises(ValueError, match="group_size must be >= 1, got 0"):
        expected_occurrence_weights(old, torch.ones(3, 1), 0)
