"""Policy losses (GRPO, DAPO, Dr.GRPO, GSPO, GSPO-token, GMPO) against hand-worked values,
their gradients, the k3 KL term, the clip metrics, padding invariance, gradcheck and bad input.

The common hand case, two rows, three token columns, old log-probs 0 so that
``logp`` is the log-ratio itself:

    row 0: A = +1, ratios (1.5, 0.9, 1.1), three tokens
    row 1: A = -1, ratios (0.5, 1.3), two tokens, the third cell is padding

Padding cells hold loud values (1e9, inf, nan) so a masking bug shows.
"""

from __future__ import annotations

import math

import pytest
import torch

from contrastive_rlvr.algorithms import POLICY_LOSSES, k3_kl, policy_loss

torch.set_num_threads(1)
LN = math.log
INF, NAN = math.inf, math.nan
ALL_LOSSES = ["grpo", "dapo", "dr_grpo", "gspo", "gspo_token", "gmpo"]


def hand_case(dtype=torch.float64):
    logp = torch.tensor([[LN(1.5), LN(0.9), LN(1.1)], [LN(0.5), LN(1.3), -INF]], dtype=dtype)
    old = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1e9]], dtype=dtype)
    adv = torch.tensor([1.0, -1.0], dtype=dtype)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return logp.requires_grad_(True), old, adv, mask


def close(actual: torch.Tensor, expected, **kw) -> None:
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), **kw)


def grad_of(loss: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(loss, x, retain_graph=True)
    return g


# ----------------------------------------------------------------------------- clipped surrogates


def test_grpo_by_hand():
    logp, old, adv, mask = hand_case()
    loss, m = policy_loss("grpo", logp, old, adv, mask)
    # Clip (0.8, 1.2). Row 0 (A=+1): min(r, clip r) = 1.2, 0.9, 1.1 -> mean 3.2/3.
    # Row 1 (A=-1): min(-r, -clip r) = min(-0.5, -0.8) = -0.8, min(-1.3, -1.2) = -1.3
    #   -> mean -2.1/2. Loss = -(3.2/3 - 2.1/2) / 2.
    close(loss, -(3.2 / 3 - 2.1 / 2) / 2)
    # Gradient d loss / d logp_t = -(1/B)(1/|o|) A r on unclipped tokens, 0 on clipped ones:
    # row 0: r=1.5 clipped (above 1.2 with A>0); r=0.9 -> -0.9/6; r=1.1 -> -1.1/6.
    # row 1: r=0.5 clipped (below 0.8 with A<0); r=1.3 with A<0 is NOT clipped -> +1.3/4.
    close(grad_of(loss, logp), [[0.0, -0.9 / 6, -1.1 / 6], [0.0, 1.3 / 4, 0.0]])
    # One low-side and one high-side clip among 5 tokens; mean ratio 5.3 / 5.
    close(m["clip/low_frac"], 0.2)
    close(m["clip/high_frac"], 0.2)
    close(m["clip/frac"], 0.4)
    close(m["ratio/mean"], 5.3 / 5)
    close(m["loss/policy"], -(3.2 / 3 - 2.1 / 2) / 2)
    assert "kl/mean" not in m
    assert all(not v.requires_grad for v in m.values())


def test_dapo_clip_higher_and_token_mean():
    logp, old, adv, mask = hand_case()
    loss, m = policy_loss("dapo", logp, old, adv, mask)
    # Clip (0.8, 1.28). Row 0: 1.28 + 0.9 + 1.1 = 3.28. Row 1: -0.8 + min(-1.3, -1.28) = -2.1.
    # One token-mean over the 5 tokens of the batch: -(3.28 - 2.1) / 5.
    close(loss, -(3.28 - 2.1) / 5)
    # every unclipped token weighs -A r / 5
    close(grad_of(loss, logp), [[0.0, -0.9 / 5, -1.1 / 5], [0.0, 1.3 / 5, 0.0]])
    close(m["clip/high_frac"], 0.2)
    close(m["clip/low_frac"], 0.2)


def test_dapo_differs_from_grpo_only_by_clip_and_aggregation():
    logp, old, adv, mask = hand_case()
    dapo, _ = policy_loss("dapo", logp, old, adv, mask)
    same, _ = policy_loss("grpo", logp, old, adv, mask, clip_high=0.28, agg="token-mean")
    close(dapo, same.item())


def test_dr_grpo_sum_over_constant_length():
    logp, old, adv, mask = hand_case()
    loss, _ = policy_loss("dr_grpo", logp, old, adv, mask)
    # Clip (0.8, 1.2): row sums 3.2 and -2.1; divided by the mask width T=3, mean over 2 rows.
    close(loss, -(3.2 - 2.1) / (3 * 2))
    loss10, _ = policy_loss("dr_grpo", logp, old, adv, mask, max_len=10)
    close(loss10, -(3.2 - 2.1) / (10 * 2))
    # every unclipped token weighs -A r / (max_len * B): no 1/|o| length bias
    close(grad_of(loss10, logp), [[0.0, -0.9 / 20, -1.1 / 20], [0.0, 1.3 / 20, 0.0]])


def test_clip_bounds_are_options():
    logp, old, adv, mask = hand_case()
    # With wide bounds nothing is clipped: row means (1.5+0.9+1.1)/3 and -(0.5+1.3)/2.
    loss, m = policy_loss("grpo", logp, old, adv, mask, clip_low=0.9, clip_high=1.0)
    close(loss, -(3.5 / 3 - 1.8 / 2) / 2)
    close(m["clip/frac"], 0.0)


def test_token_level_advantages():
    logp, old, _, mask = hand_case()
    adv = torch.tensor([[1.0, 2.0, 0.0], [-1.0, -1.0, INF]], dtype=torch.float64)
    loss, _ = policy_loss("grpo", logp, old, adv, mask)
    # Row 0: 1*min(1.5,1.2) + 2*0.9 + 0 = 3.0 -> mean 1.0; row 1 as before -2.1/2.
    close(loss, -(1.0 - 1.05) / 2)
    g = grad_of(loss, logp)
    assert torch.isfinite(g).all()
    close(g, [[0.0, -2 * 0.9 / 6, 0.0], [0.0, 1.3 / 4, 0.0]])


# ----------------------------------------------------------------------------- KL


def test_k3_kl_by_hand():
    # k3(d) = e^d - d - 1 with d = l_ref - l_theta
    logp = torch.tensor([[0.0, 0.0, 5.0], [0.0, 0.0, NAN]], dtype=torch.float64)
    ref = torch.tensor([[0.0, LN(2), -LN(2)], [LN(2), 0.0, 1e9]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    close(k3_kl(logp, ref, mask), [[0.0, 1 - LN(2), 0.0], [1 - LN(2), 0.0, 0.0]])


def test_grpo_with_k3_kl_term():
    logp, old, adv, mask = hand_case()
    # d = l_ref - l_theta per token: row 0 (0, ln 2, -ln 2), row 1 (ln 2, 0, pad)
    d = torch.tensor([[0.0, LN(2), -LN(2)], [LN(2), 0.0, NAN]], dtype=torch.float64)
    ref = logp.detach() + d
    beta = 0.04
    loss, m = policy_loss("grpo", logp, old, adv, mask, ref_logp=ref, beta=beta)
    # k3: ln2 -> 2 - ln2 - 1 = 1 - ln2; -ln2 -> 1/2 + ln2 - 1 = ln2 - 1/2.
    # Row means: (0 + 1 - ln2 + ln2 - 1/2)/3 = 0.5/3; (1 - ln2 + 0)/2. Aggregated like the policy.
    kl = (0.5 / 3 + (1 - LN(2)) / 2) / 2
    policy = -(3.2 / 3 - 2.1 / 2) / 2
    close(loss, policy + beta * kl)
    close(m["loss/policy"], policy)
    # kl/mean: token mean (1 - ln2 + ln2 - 1/2 + 1 - ln2) / 5
    close(m["kl/mean"], (1.5 - LN(2)) / 5)
    # beta = 0 with a reference: the KL is reported but not added
    loss0, m0 = policy_loss("grpo", logp, old, adv, mask, ref_logp=ref, beta=0.0)
    close(loss0, policy)
    close(m0["kl/mean"], (1.5 - LN(2)) / 5)


def test_kl_gradient_by_hand():
    # d k3 / d l_theta = -e^d + 1 with d = l_ref - l_theta; seq-mean-token-mean weights 1/(B|o|).
    logp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[LN(2), 0.0]], dtype=torch.float64)
    mask = torch.ones(1, 2)
    loss, _ = policy_loss("grpo", logp, torch.zeros(1, 2, dtype=torch.float64),
                          torch.zeros(1, dtype=torch.float64), mask, ref_logp=ref, beta=0.5)
    close(grad_of(loss, logp), [[0.5 * (1 - 2) / 2, 0.0]])


@pytest.mark.parametrize("name", ALL_LOSSES)
def test_beta_without_reference_raises(name):
    logp, old, adv, mask = hand_case()
    with pytest.raises(ValueError, match="needs ref_logp"):
        policy_loss(name, logp, old, adv, mask, beta=0.1)


# ----------------------------------------------------------------------------- GSPO


def test_gspo_by_hand():
    logp, old, adv, mask = hand_case()
    # Sequence ratios: s0 = (1.5 * 0.9 * 1.1)^(1/3) = 1.485^(1/3); s1 = (0.5 * 1.3)^(1/2).
    s0, s1 = 1.485 ** (1 / 3), 0.65**0.5
    # Paper clip (3e-4, 4e-4): s0 > 1.0004 with A>0 -> 1.0004; s1 < 0.9997 with A<0 -> -0.9997.
    loss, m = policy_loss("gspo", logp, old, adv, mask)
    close(loss, -(1.0004 - 0.9997) / 2)
    close(grad_of(loss, logp), torch.zeros(2, 3))  # both rows clipped
    close(m["clip/high_frac"], 0.5)
    close(m["clip/low_frac"], 0.5)
    close(m["clip/frac"], 1.0)
    close(m["ratio/mean"], (s0 + s1) / 2)
    # Wide clip (0.2, 0.2): neither is clipped (0.8 < 0.806, 1.141 < 1.2).
    loss, m = policy_loss("gspo", logp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    close(loss, -(s0 - s1) / 2)
    close(m["clip/frac"], 0.0)
    # d s_i / d logp_t = s_i / |o_i|: row 0 -> -(1/2) s0 / 3, row 1 -> +(1/2) s1 / 2.
    close(grad_of(loss, logp), [[-s0 / 6] * 3, [s1 / 4, s1 / 4, 0.0]])


def test_gspo_token_by_hand_with_token_advantages():
    # One row, ratios (1.21, 1): s = 1.21^(1/2) = 1.1, inside (0.8, 1.2).
    logp = torch.tensor([[LN(1.21), 0.0, 1e9]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 3, dtype=torch.float64)
    adv = torch.tensor([[1.0, 3.0, NAN]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0]])
    loss, _ = policy_loss("gspo_token", logp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    # Every token's ratio has the value s = 1.1: -(1/2)(1.1 * 1 + 1.1 * 3) = -2.2.
    close(loss, -2.2)
    # ... and the gradient of its own log-prob only: -(1/2) A_t s = (-0.55, -1.65).
    close(grad_of(loss, logp), [[-0.55, -1.65, 0.0]])


@pytest.mark.parametrize(("clip_low", "clip_high"), [(3e-4, 4e-4), (0.2, 0.2), (0.05, 0.1)])
def test_gspo_token_equals_gspo_for_per_row_advantages(clip_low, clip_high):
    g = torch.Generator().manual_seed(3)
    b, t = 8, 6
    logp = (torch.randn(b, t, generator=g, dtype=torch.float64) * 0.2).requires_grad_(True)
    old = torch.randn(b, t, generator=g, dtype=torch.float64) * 0.2
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    mask = (torch.arange(t) < torch.randint(1, t + 1, (b, 1), generator=g)).long()
    logp_pad = logp.masked_fill(mask == 0, 1e9)  # loud padding, still differentiable
    opts = dict(clip_low=clip_low, clip_high=clip_high)
    seq, _ = policy_loss("gspo", logp_pad, old, adv, mask, **opts)
    tok, _ = policy_loss("gspo_token", logp_pad, old, adv, mask, **opts)
    tok2d, _ = policy_loss("gspo_token", logp_pad, old, adv.unsqueeze(1).expand(b, t), mask,
                           **opts)
    close(tok, seq.item())
    close(tok2d, seq.item())
    g_seq, g_tok = grad_of(seq, logp), grad_of(tok, logp)
    torch.testing.assert_close(g_tok, g_seq)
    assert g_seq.abs().sum() > 0 or clip_low == 3e-4  # the wide clips leave gradient


# ----------------------------------------------------------------------------- GMPO


def test_gmpo_by_hand():
    d = torch.tensor([[0.5, -0.6, 0.1], [0.5, -0.6, 1e9]], dtype=torch.float64)
    logp = d.clone().requires_grad_(True)
    old = torch.zeros(2, 3, dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    loss, m = policy_loss("gmpo", logp, old, adv, mask)
    # eps 0.4. A>0: d~ = min(d, clip(d)) = (0.4, -0.6, 0.1): only the upward step is cut
    #   -> w0 = exp(-0.1 / 3).
    # A<0: d~ = max(d, clip(d)) = (0.5, -0.4): only the downward step is cut -> w1 = exp(0.05).
    w0, w1 = math.exp(-0.1 / 3), math.exp(0.05)
    close(loss, -(1 * w0 + (-2) * w1) / 2)
    # d loss / d logp_t = -(1/B) A w / |o| on uncut tokens, 0 on cut ones.
    close(grad_of(loss, logp), [[0.0, -w0 / 6, -w0 / 6], [0.0 + 2 * w1 / 4, 0.0, 0.0]])
    close(m["clip/high_frac"], 0.2)  # row 0 token 0
    close(m["clip/low_frac"], 0.2)  # row 1 token 1
    close(m["clip/frac"], 0.4)
    close(m["ratio/mean"], (w0 + w1) / 2)


def test_gmpo_clip_is_sign_dependent():
    # The same log-ratios d = (0.5, -0.6): with A>0 the geometric mean is exp((0.4 - 0.6)/2),
    # with A<0 it is exp((0.5 - 0.4)/2). Loss = -A w.
    logp = torch.tensor([[0.5, -0.6], [0.5, -0.6]], dtype=torch.float64)
    old = torch.zeros(2, 2, dtype=torch.float64)
    mask = torch.ones(2, 2)
    pos, _ = policy_loss("gmpo", logp, old, torch.tensor([1.0, 1.0], dtype=torch.float64), mask)
    neg, _ = policy_loss("gmpo", logp, old, torch.tensor([-1.0, -1.0], dtype=torch.float64),
                         mask)
    close(pos, -math.exp(-0.1))
    close(neg, math.exp(0.05))


def test_gmpo_zero_advantage_counts_no_clip():
    # A = 0 rows have no gradient at all, so nothing in them counts as clipped.
    logp = torch.tensor([[-1.0, 1.0]], dtype=torch.float64)
    _, m = policy_loss("gmpo", logp, torch.zeros(1, 2, dtype=torch.float64),
                       torch.zeros(1, dtype=torch.float64), torch.ones(1, 2))
    close(m["clip/frac"], 0.0)
    close(m["clip/low_frac"] + m["clip/high_frac"], 0.0)


# ----------------------------------------------------------------------------- padding


@pytest.mark.parametrize(
    ("name", "token_adv"),
    [(n, False) for n in ALL_LOSSES]
    + [(n, True) for n in ALL_LOSSES if not POLICY_LOSSES[n].per_row_advantages_only],
)
def test_padding_never_changes_the_result(name, token_adv):
    g = torch.Generator().manual_seed(4)
    b, t, extra = 4, 5, 3
    logp = torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3
    old = torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3
    ref = torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3
    adv = torch.randn(b, t, generator=g, dtype=torch.float64) if token_adv else torch.randn(
        b, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    junk = torch.tensor([1e9, INF, NAN], dtype=torch.float64).expand(b, extra)

    def pad(x):
        return torch.cat([x, junk], 1)

    opts = dict(clip_low=0.2, clip_high=0.25, beta=0.1)
    if name == "dr_grpo":
        opts["max_len"] = 8  # the default max_len is the mask width, which padding changes
    x = logp.clone().requires_grad_(True)
    loss, m = policy_loss(name, x, old, adv, mask, ref_logp=ref, **opts)
    xp = pad(logp).requires_grad_(True)
    adv_p = pad(adv) if token_adv else adv
    mask_p = torch.cat([mask, torch.zeros(b, extra, dtype=mask.dtype)], 1)
    loss_p, m_p = policy_loss(name, xp, pad(old), adv_p, mask_p, ref_logp=pad(ref), **opts)
    torch.testing.assert_close(loss_p, loss)
    for k in m:
        torch.testing.assert_close(m_p[k], m[k])
    gp = grad_of(loss_p, xp)
    torch.testing.assert_close(gp[:, :t], grad_of(loss, x))
    assert (gp[:, t:] == 0).all()


def test_dr_grpo_default_length_is_the_mask_width():
    logp, old, adv, mask = hand_case()
    wide = torch.cat([logp, torch.zeros(2, 2, dtype=torch.float64)], 1)
    loss, _ = policy_loss("dr_grpo", wide, torch.cat([old, old[:, :2]], 1), adv,
                          torch.cat([mask, torch.zeros(2, 2, dtype=mask.dtype)], 1))
    close(loss, -(3.2 - 2.1) / (5 * 2))  # T = 5 now


# ----------------------------------------------------------------------------- gradcheck


def _gradcheck_inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    b, t = 4, 5
    logp = (torch.randn(b, t, generator=g, dtype=torch.float64) * 0.15).requires_grad_(True)
    old = torch.randn(b, t, generator=g, dtype=torch.float64) * 0.15
    ref = torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]])
    return logp, old, ref, adv, mask


@pytest.mark.parametrize("name", ALL_LOSSES)
def test_gradcheck_float64(name):
    logp, old, ref, adv, mask = _gradcheck_inputs(5)
    # Bounds such that some terms are clipped and some are not; random inputs sit
    # far (>> 1e-6) from the kinks of min/clamp.
    opts = dict(clip_low=0.15, clip_high=0.2, ref_logp=ref, beta=0.05)
    if name == "gmpo":
        opts.update(clip_low=0.1, clip_high=0.1)
    loss, m = policy_loss(name, logp, old, adv, mask, **opts)
    assert m["clip/frac"] > 0 or name in ("gspo", "gspo_token")
    assert torch.autograd.gradcheck(
        lambda x: policy_loss(name, x, old, adv, mask, **opts)[0], (logp,)
    )


# ----------------------------------------------------------------------------- bad input


def test_unknown_loss_name_lists_valid_ones():
    logp, old, adv, mask = hand_case()
    with pytest.raises(ValueError, match="unknown policy loss 'ppo'.*dapo.*grpo"):
        policy_loss("ppo", logp, old, adv, mask)


def test_unknown_option_raises():
    logp, old, adv, mask = hand_case()
    with pytest.raises(ValueError, match=r"'grpo' takes no option\(s\) \['clip_ratio'\]"):
        policy_loss("grpo", logp, old, adv, mask, clip_ratio=0.2)
    with pytest.raises(ValueError, match="takes no option.*max_len"):
        policy_loss("gspo", logp, old, adv, mask, max_len=10)


@pytest.mark.parametrize("name", ["gspo", "gmpo"])
def test_sequence_losses_refuse_token_advantages(name):
    logp, old, _, mask = hand_case()
    with pytest.raises(ValueError, match="needs per-row advantages"):
        policy_loss(name, logp, old, torch.zeros(2, 3, dtype=torch.float64), mask)


def test_shapes_that_disagree():
    logp, old, adv, mask = hand_case()
    with pytest.raises(ValueError, match="shapes disagree"):
        policy_loss("grpo", logp, old[:, :2], adv, mask)
    with pytest.raises(ValueError, match="shapes disagree"):
        policy_loss("grpo", logp, old, adv, mask[:, :2])
    with pytest.raises(ValueError, match="advantages has 3 rows but mask has 2"):
        policy_loss("grpo", logp, old, torch.zeros(3), mask)
    with pytest.raises(ValueError, match="shapes disagree"):
        policy_loss("grpo", logp, old, torch.zeros(2, 4), mask)
    with pytest.raises(ValueError, match=r"advantages must be \(2,\)"):
        policy_loss("gspo", logp, old, torch.zeros(3), mask)
    with pytest.raises(ValueError, match="shapes disagree"):
        policy_loss("grpo", logp, old, adv, mask, ref_logp=old[:, :2], beta=0.1)
    with pytest.raises(ValueError, match=r"logp must be \(B, T\)"):
        policy_loss("grpo", logp[0], old[0], adv, mask[0])


def test_negative_clip_bound_raises():
    logp, old, adv, mask = hand_case()
    with pytest.raises(ValueError, match="clip bounds must be >= 0"):
        policy_loss("grpo", logp, old, adv, mask, clip_low=-0.1)


# ----------------------------------------------------------------------------- extremes


@pytest.mark.parametrize("name", ALL_LOSSES)
@pytest.mark.parametrize("shift", [100.0, -100.0])
def test_extreme_log_ratios_stay_finite(name, shift):
    # exp(100) would overflow float32; the log-ratio is clamped to +-20 before exp().
    logp = torch.full((2, 3), shift, requires_grad=True)
    old = torch.zeros(2, 3)
    adv = torch.tensor([1.0, -1.0])
    loss, m = policy_loss(name, logp, old, adv, torch.ones(2, 3), ref_logp=old, beta=0.1)
    (g,) = torch.autograd.grad(loss, logp)
    assert torch.isfinite(loss) and torch.isfinite(g).all()
    assert all(torch.isfinite(v) for v in m.values())


def test_loss_option_names():
    from contrastive_rlvr.algorithms import loss_option_names

    token = {"clip_low", "clip_high", "agg", "ref_logp", "beta", "max_len", "num_rows",
             "num_tokens"}
    sequence = {"clip_low", "clip_high", "ref_logp", "beta", "num_rows"}
    for name in ("grpo", "dapo", "dr_grpo"):
        assert loss_option_names(name) == token
    for name in ("gspo", "gspo_token", "gmpo"):
        assert loss_option_names(name) == sequence
    with pytest.raises(ValueError, match="unknown policy loss"):
        loss_option_names("ppo")
