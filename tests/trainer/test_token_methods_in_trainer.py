"""The token-level methods in the trainer: VeriGate, ReCo and OC-GRPO switched on in RLVRTrainer.

The formulas have their own hand-worked tests (tests/algorithms/test_verigate.py,
test_reco.py, test_ocgrpo.py); these check the wiring: which rows get which inputs, on
which prompt the loss is computed, and that a few steps train.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from test_trl_hooks import direct_logps, rows
from trainer_utils import GROUP, make_config, save_tiny_model
from transformers import AutoModelForCausalLM

import contrastive_rlvr.trainer.loss.objectives as objectives_module
import contrastive_rlvr.trainer.stages.reco as reco_stage_module
from contrastive_rlvr.algorithms import ArithmeticStepScorer, group_advantages, verigate_advantages
from contrastive_rlvr.embedded import load_char_tokenizer
from contrastive_rlvr.trainer import RLVRConfig, RLVRTrainer
from contrastive_rlvr.trainer.stages.process_scorers import PRMScorer
from contrastive_rlvr.trainer.token_method_inputs import (
    build_process_scorer,
    guided_rows,
    response_keys,
)

SOLUTION = "12+5=17"  # hint at fraction 0.5: the first floor(0.5 * 7) = 3 characters, "12+"
SCORER = "test_token_methods_in_trainer:digit_scorer"
EACH_CHARACTER = r"[\s\S]"  # VeriGate step rule for the tests: every character is a step


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def dataset(n: int = 16) -> Dataset:
    prompts = [f"{i}+{i + 3}+{i + 5}=" for i in range(n)]
    return Dataset.from_dict({"prompt": prompts, "answer": ["1"] * n, "solution": [SOLUTION] * n})


def trainer_for(model_dir, config, reward) -> RLVRTrainer:
    return RLVRTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=[reward],
        args=config,
        train_dataset=dataset(),
        processing_class=load_char_tokenizer(model_dir),
    )


def digit_scorer(prompt: str, steps: list[str]) -> list[float]:
    """Process scorer of the tests: a step (one character) scores 1 if it is a digit."""
    return [1.0 if s.isdigit() else 0.0 for s in steps]


def half_gated_reward(prompts, completions, completion_ids, **kwargs) -> list[float]:
    """Prompts with an even first digit always score 1 (a gated group); the others score
    the parity of the token-id sum (mixed groups, almost surely)."""
    return [
        1.0 if int(p[0]) % 2 == 0 else float(sum(ids) % 2 == 0)
        for p, ids in zip(prompts, completion_ids, strict=True)
    ]


def token_parity_reward(prompts, completions, completion_ids, **kwargs) -> list[float]:
    return [float(sum(ids) % 2 == 0) for ids in completion_ids]


SEEN_PROMPTS: list[str] = []


def hint_only_reward(prompts, completions, completion_ids, **kwargs) -> list[float]:
    """0 for every plain prompt (all groups fail); with the hint, the first row of each
    group scores 1 (every guided group is rescued, and mixed). Records the prompts."""
    SEEN_PROMPTS.extend(prompts)
    return [float(p.startswith("Hint: ") and i % GROUP == 0) for i, p in enumerate(prompts)]


def first_batch(trainer):
    trainer.model.train()
    return next(iter(trainer.get_train_dataloader()))


def weights_changed(trainer, before) -> bool:
    return any(
        not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters(), strict=True)
    )


SWITCHES = {
    "verigate": (
        dict(
            verigate=True,
            verigate_scorer=SCORER,
            verigate_step_rule="regex",
            verigate_step_pattern=EACH_CHARACTER,
        ),
        half_gated_reward,
    ),
    "reco": (dict(reco=True), token_parity_reward),
    "oc_grpo": (dict(oc_grpo=True), hint_only_reward),
}


@pytest.mark.parametrize("name", list(SWITCHES))
def test_a_few_steps_train_with_each_switch(model_dir, tmp_path, name):
    options, reward = SWITCHES[name]
    trainer = trainer_for(model_dir, make_config(tmp_path, max_steps=2, **options), reward)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.nonfinite_losses == 0 and trainer.skipped_updates == 0
    assert weights_changed(trainer, before)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    expected_loss = {"verigate": "grpo", "reco": "reco", "oc_grpo": "oc_grpo"}[name]
    assert trainer.loss_name == expected_loss


def expected_step_index(tokenizer, completion: list[int]) -> list[int]:
    """Every real character is a step (rule EACH_CHARACTER), so token t is step 'real
    tokens before it'; a special token (zero width) joins the step of the token before
    it (the first step if it comes first); no real character: no step (-1)."""
    real = [tokenizer.decode([t], skip_special_tokens=True) != "" for t in completion]
    if not any(real):
        return [-1] * len(completion)
    index, seen = [], 0
    for is_real in real:
        seen += is_real
        index.append(max(seen - 1, 0))
    return index


def test_verigate_token_advantages(model_dir, tmp_path):
    options, reward = SWITCHES["verigate"]
    config = make_config(
        tmp_path, per_device_train_batch_size=4 * GROUP, verigate_process_norm="steps", **options
    )
    trainer = trainer_for(model_dir, config, reward)
    out = trainer._generate_and_score_completions(first_batch(trainer))
    tok = trainer.processing_class
    completions = rows(out["completion_ids"], out["completion_mask"])
    mask = out["completion_mask"]
    rewards = out["rewards"]
    texts = [[tok.decode([t], skip_special_tokens=True) for t in c] for c in completions]
    scores = [[1.0 if ch.isdigit() else 0.0 for ch in "".join(t)] for t in texts]
    index = torch.full(mask.shape, -1)
    for i, c in enumerate(completions):
        index[i, : len(c)] = torch.tensor(expected_step_index(tok, c))
    eps = config.adv_eps  # TRL's 1e-4 by default, in the outcome and the process parts
    expected, metrics = verigate_advantages(
        rewards, GROUP, scores, index, mask, eps=eps,
        outcome=group_advantages(rewards, GROUP, eps=eps),
    )  # fmt: skip
    torch.testing.assert_close(out["advantages"], expected)
    gated = [g for g in range(4) if rewards[g * GROUP : (g + 1) * GROUP].unique().numel() == 1]
    assert 0 < len(gated) < 4, "the batch should hold gated and mixed groups"
    logged = trainer._metrics["train"]
    assert logged["verigate/gated_frac"][-1] == len(gated) / 4
    # One gated group by hand (process_norm "steps", DeepSeekMath): the step scores
    # normalised over all steps of the group with the Bessel std, then summed from
    # step j on; token t of row i has the value of its step.
    g = gated[0]
    members = range(g * GROUP, (g + 1) * GROUP)
    flat = torch.tensor([p for i in members for p in scores[i]])
    if flat.unique().numel() > 1:
        mean, std = flat.mean(), flat.std() + eps
        norm = {i: [(p - mean) / std for p in scores[i]] for i in members}
        for i in members:
            for t, step in enumerate(index[i, : len(completions[i])].tolist()):
                value = sum(norm[i][step:]) if step >= 0 else 0.0
                assert out["advantages"][i, t].item() == pytest.approx(float(value), abs=1e-5)


def test_reco_weights_count_identical_completions(model_dir, tmp_path):
    trainer = trainer_for(model_dir, make_config(tmp_path, reco=True), token_parity_reward)
    out = trainer._generate_and_score_completions(first_batch(trainer))
    completions = rows(out["completion_ids"], out["completion_mask"])
    for i, c in enumerate(completions):
        group = completions[(i // GROUP) * GROUP : (i // GROUP + 1) * GROUP]
        assert out["reco_weights"][i].item() == pytest.approx(1 / group.count(c))
    # Whole-batch normalisers: sum of weights, and weighted completion tokens.
    lengths = out["completion_mask"].sum(1).float()
    assert out["reco_weight_sum"].item() == pytest.approx(out["reco_weights"].sum().item())
    assert out["reco_weighted_tokens"].item() == pytest.approx(
        (out["reco_weights"] * lengths).sum().item()
    )


def test_reco_expected_weights_from_pi_old_of_each_row(model_dir, tmp_path):
    # Temperature 0.1 sharpens the tiny random model so that G * pi_old(o | q) > 1 for
    # some rows (the weight is then below 1); 2 tokens per completion.
    temperature = 0.1
    config = make_config(
        tmp_path, reco=True, reco_weights="expected", max_completion_length=2,
        temperature=temperature,
    )  # fmt: skip
    trainer = trainer_for(model_dir, config, token_parity_reward)
    out = trainer._generate_and_score_completions(first_batch(trainer))
    prompts = rows(out["prompt_ids"], out["prompt_mask"])
    completions = rows(out["completion_ids"], out["completion_mask"])
    expected = []
    for prompt, completion in zip(prompts, completions, strict=True):
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = trainer.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        logp = torch.log_softmax(logits / temperature, dim=-1)
        seq = logp.gather(1, torch.tensor(completion)[:, None]).sum()
        expected.append(1 / max(1.0, GROUP * seq.exp().item()))  # 1 / max(1, G pi_old(o))
    assert min(expected) < 0.9, "the test needs rows the sampler would draw more than once"
    assert out["reco_weights"].tolist() == pytest.approx(expected, rel=1e-4)
    lengths = out["completion_mask"].sum(1).float()
    assert out["reco_weight_sum"].item() == pytest.approx(sum(expected), rel=1e-4)
    assert out["reco_weighted_tokens"].item() == pytest.approx(
        (torch.tensor(expected) * lengths).sum().item(), rel=1e-4
    )


def test_oc_grpo_guided_prompts_and_loss_on_the_unguided_prompt(model_dir, tmp_path, monkeypatch):
    trainer = trainer_for(model_dir, make_config(tmp_path, oc_grpo=True), hint_only_reward)
    batch = first_batch(trainer)
    SEEN_PROMPTS.clear()
    out = trainer._generate_and_score_completions(batch)
    plain = [row["prompt"] for row in batch]
    # First round: the plain prompts (all fail); second round: hint "12+" before each prompt.
    assert SEEN_PROMPTS == plain + [f"Hint: 12+\n{p}" for p in plain]
    assert out["oc_guided"].all()  # every group failed and was rescued: replaced
    tok = trainer.processing_class
    prompts = rows(out["prompt_ids"], out["prompt_mask"])
    assert [tok.decode(p, skip_special_tokens=True) for p in prompts] == plain
    assert out["rewards"].tolist() == [float(i % GROUP == 0) for i in range(len(plain))]
    assert trainer._metrics["train"]["oc/rescued_frac"][-1] == 1.0

    captured = {}
    real = objectives_module.policy_loss

    def capture(name, logp, old, advantages, mask, **options):
        captured.update(name=name, logp=logp.detach(), old=old, guided=options.get("guided"))
        return real(name, logp, old, advantages, mask, **options)

    monkeypatch.setattr(objectives_module, "policy_loss", capture)
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop
    trainer._compute_loss(trainer.model, out)
    assert captured["name"] == "oc_grpo" and captured["guided"].all()
    completions = rows(out["completion_ids"], out["completion_mask"])
    for i, c in enumerate(completions):
        # pi_theta(o | q): a forward on the unguided prompt and the completion.
        torch.testing.assert_close(
            captured["logp"][i, : len(c)],
            direct_logps(trainer.model, prompts[i], c),
            atol=1e-5,
            rtol=1e-5,
        )
        # pi_old(o | q, hint): the sampling-time log-probs on the guided prompt.
        hinted = tok(f"Hint: 12+\n{plain[i]}")["input_ids"]
        torch.testing.assert_close(
            captured["old"][i, : len(c)],
            direct_logps(trainer.model, hinted, c),
            atol=1e-5,
            rtol=1e-5,
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(reco=True, oc_grpo=True), "oc_grpo=True and reco=True cannot be combined"),
        (dict(oc_grpo=True, bicc=True), "bicc=True and oc_grpo=True cannot be combined"),
        (dict(verigate=True, recipe="dapo"), "verigate=True with dynamic sampling"),
        (dict(reco=True, recipe="gspo"), "reco=True does not work with recipe 'gspo'"),
        (dict(verigate=True, rcc=True, rcc_reference="sampling"), "rcc_reference='sampling'"),
        (dict(verigate=True, verigate_step_rule="regex"), "verigate_step_pattern"),
        (dict(oc_grpo=True, oc_hint_fraction=1.5), "oc_hint_fraction"),
        # 3 micro-batches per generation: an appended group of 4 rows cannot be split evenly.
        (dict(oc_grpo=True, oc_merge="append", gradient_accumulation_steps=3), "oc_merge='append'"),
    ],
)
def test_incompatible_settings_fail_before_any_model_loads(tmp_path, options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_config(tmp_path, **options)


def test_oc_grpo_needs_the_solution_column(model_dir, tmp_path):
    config = make_config(tmp_path, oc_grpo=True, oc_solution_column="reference")
    with pytest.raises(ValueError, match="oc_solution_column='reference'"):
        trainer_for(model_dir, config, hint_only_reward)


def test_config_switches_default_off(tmp_path):
    config = RLVRConfig(output_dir=str(tmp_path), report_to="none")
    assert not (config.verigate or config.reco or config.oc_grpo)


def parity_keys(completions, texts, identity):
    """Responses keyed by the parity of their token-id sum: 4 rows, 2 keys, so every
    group holds a duplicate (weights below 1), and same key means same reward."""
    return [sum(ids) % 2 for ids in completions]


def test_reco_micro_batch_losses_add_up_to_the_window_loss(model_dir, tmp_path, monkeypatch):
    # Two micro-batches of one group each; their losses must sum to the ReCo loss of the
    # whole window, whose default normalisers are the window's sum of weights and its own
    # mean p(1-p) (reco_loss without num_rows / variance_mean).
    monkeypatch.setattr(reco_stage_module, "response_keys", parity_keys)
    config = make_config(
        tmp_path, reco=True, gradient_accumulation_steps=2, per_device_train_batch_size=GROUP
    )
    trainer = trainer_for(model_dir, config, token_parity_reward)
    batch = first_batch(trainer)
    trainer.current_gradient_accumulation_steps = 2
    micro = []
    for step in range(2):
        trainer._step = step
        micro.append(trainer._prepare_inputs(batch))
    total = sum(trainer._compute_loss(trainer.model, m) for m in micro)

    logps, advantages, weights, masks = [], [], [], []
    for m in micro:
        with torch.no_grad():
            logps.append(
                trainer._logps(
                    trainer.model,
                    m["prompt_ids"],
                    m["prompt_mask"],
                    m["completion_ids"],
                    m["completion_mask"],
                )
            )
        advantages.append(m["advantages"])
        weights.append(m["reco_weights"])
        masks.append(m["completion_mask"])
    assert torch.cat(weights).min() < 1, "the test needs a duplicate completion"
    width = max(x.size(1) for x in masks)

    def cat(parts):
        return torch.cat([torch.nn.functional.pad(p, (0, width - p.size(1))) for p in parts])

    logp, mask = cat(logps), cat(masks)
    expected, _ = objectives_module.policy_loss(
        "reco", logp, logp, torch.cat(advantages), mask, weights=torch.cat(weights)
    )
    assert total.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)


MULTI_SCRIPT = Path(__file__).parents[1] / "scripts" / "token_methods_run.py"


def launch(args: list[str], processes: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, str(MULTI_SCRIPT), *args]
    if processes > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
               str(processes), "--master_port", "29523", str(MULTI_SCRIPT), *args]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


def compare_launches(one: Path, two: Path, methods: tuple[str, ...]) -> None:
    """The rows of both processes, in rank order, equal the single process's rows."""
    for method in methods:
        a = json.loads((one / f"{method}_rank0.json").read_text())
        ranks = [json.loads((two / f"{method}_rank{r}.json").read_text()) for r in (0, 1)]
        assert len(a) == 2
        for step, step_a in enumerate(a):
            merged = {k: ranks[0][step][k] for k in step_a}
            for key, value in merged.items():
                if value is not None:
                    merged[key] = value + ranks[1][step][key]
            assert merged["prompts"] == step_a["prompts"]
            assert merged["rewards"] == step_a["rewards"]
            assert merged["reco_weights"] == step_a["reco_weights"]
            if method == "reco":  # the duplicate completion of each group: weight 1/2
                assert sorted(step_a["reco_weights"])[:2] == [0.5, 0.5]
            assert merged["oc_guided"] == step_a["oc_guided"]
            for x, y in zip(merged["advantages"], step_a["advantages"], strict=True):
                assert x == pytest.approx(y, abs=1e-5)
        flat = [abs(v) for row in a[0]["advantages"] for v in row]
        assert max(flat) > 0, f"{method}: the step should carry a gradient"


def test_two_processes_match_one(model_dir, tmp_path):
    # Fixed completions (a function of prompt and place in the group): one process and
    # two processes see the same batch, so every gathered group statistic must agree.
    # VeriGate and ReCo with one group split across the two processes; OC-GRPO, which
    # needs whole groups on each process, with one group on each.
    one, two = tmp_path / "one", tmp_path / "two"
    launch([str(model_dir), str(one), f"verigate:{GROUP},reco:{GROUP},oc_grpo:{2 * GROUP}"], 1)
    half = GROUP // 2
    launch([str(model_dir), str(two), f"verigate:{half},reco:{half},oc_grpo:{GROUP}"], 2)
    compare_launches(one, two, ("verigate", "reco", "oc_grpo"))
    assert all(json.loads((one / "oc_grpo_rank0.json").read_text())[0]["oc_guided"])


def three_kinds_reward(prompts, completions, completion_ids, **kwargs) -> list[float]:
    """By the prompt's first number n: n <= 5 all right, 6..10 all wrong unless hinted
    (then the first row of the group is right), n >= 11 the first row of the group right."""
    out = []
    for i, p in enumerate(prompts):
        n = int(p.removeprefix("Hint: 12+\n").split("+")[0])
        first = float(i % GROUP == 0)
        out.append(1.0 if n <= 5 else first if (n >= 11 or p.startswith("Hint: ")) else 0.0)
    return out


def test_oc_grpo_then_dynamic_sampling(model_dir, tmp_path):
    # DAPO: OC-GRPO rescues the all-wrong group first, then dynamic sampling replaces the
    # all-right group by a mixed one; the merged batch keeps the guided rows' entries.
    config = make_config(
        tmp_path,
        recipe="dapo",
        oc_grpo=True,
        overlong_punishment=False,
        dynamic_sampling_max_rounds=10,
    )
    trainer = trainer_for(model_dir, config, three_kinds_reward)
    trainer.model.train()
    rows_in = [dict(dataset()[n]) for n in (0, 7) for _ in range(GROUP)]
    out = trainer._generate_and_score_completions(rows_in)
    prompts = [
        trainer.processing_class.decode(p, skip_special_tokens=True)
        for p in rows(out["prompt_ids"], out["prompt_mask"])
    ]
    first = [int(p.split("+")[0]) for p in prompts]
    assert all(n >= 11 for n in first[:GROUP])  # the all-right group, replaced
    assert first[GROUP:] == [7] * GROUP  # the rescued group, on its unhinted prompt
    assert out["oc_guided"].tolist() == [False] * GROUP + [True] * GROUP
    assert out["rewards"].tolist() == [1.0, 0.0, 0.0, 0.0] * 2
    assert out["oc_sampling_logps"][:GROUP].abs().sum() == 0  # unguided rows: unused zeros
    trainer.current_gradient_accumulation_steps = 1
    assert torch.isfinite(trainer._compute_loss(trainer.model, out))


def test_verigate_with_gspo_uses_gspo_token(model_dir, tmp_path):
    options, reward = SWITCHES["verigate"]
    trainer = trainer_for(model_dir, make_config(tmp_path, recipe="gspo", **options), reward)
    assert trainer.loss_name == "gspo_token"
    trainer.train()
    assert trainer.nonfinite_losses == 0


def test_build_process_scorer_specs(tmp_path):
    assert isinstance(build_process_scorer("arithmetic"), ArithmeticStepScorer)
    prm = build_process_scorer(str(tmp_path))  # a directory: a local PRM, loaded lazily
    assert isinstance(prm, PRMScorer) and prm.path == tmp_path
    fn = build_process_scorer(SCORER)
    assert fn("", ["1", "a", "7"]) == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="verigate_scorer='no_such_module:f'"):
        build_process_scorer("no_such_module:f")


def test_response_keys_by_answer():
    ids = [[1, 2], [3, 4], [5], [5]]
    texts = ["14+3=17", "so 17", "no answer", "no answer"]
    keys = response_keys(ids, texts, "answer")
    # The first two state the same final number; the last two state none and are
    # the same token ids: two pairs of equal keys.
    assert keys[0] == keys[1] and keys[2] == keys[3] and keys[0] != keys[2]
    assert response_keys([[5], [6]], None, "tokens") == [("tokens", (5,)), ("tokens", (6,))]


def test_guided_rows_text_and_chat_prompts():
    rows_in = [
        {"prompt": "5+9+3+2=", "solution": "14+3=17,17+2=19"},
        {"prompt": [{"role": "user", "content": "5+9+3+2="}], "solution": "14+3=17,17+2=19"},
    ]
    out = guided_rows(
        rows_in, column="solution", fraction=0.5, unit="chars", template="H:{hint}|{prompt}"
    )
    # floor(0.5 * 15) = 7 characters: "14+3=17".
    assert out[0]["prompt"] == "H:14+3=17|5+9+3+2="
    assert out[1]["prompt"] == [{"role": "user", "content": "H:14+3=17|5+9+3+2="}]
    assert rows_in[1]["prompt"][0]["content"] == "5+9+3+2="  # the dataset row is untouched
    with pytest.raises(ValueError, match="column 'reference'"):
        guided_rows(
            rows_in, column="reference", fraction=0.5, unit="chars", template="{hint}{prompt}"
        )


def test_reco_entropy_factor_reads_the_loss_forward_entropies(model_dir, tmp_path, monkeypatch):
    # reco_factor='entropy': the loss gets the current policy's next-token entropies
    # H_t = -sum_v p log p of its own forward, checked against a direct forward.
    config = make_config(tmp_path, reco=True, reco_factor="entropy", reco_factor_norm="max")
    trainer = trainer_for(model_dir, config, token_parity_reward)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    batch = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    assert "reco_variance_mean" not in batch  # the variance factor's Z is not needed
    seen = []
    original = objectives_module.policy_loss

    def capture(name, logp, old, advantages, mask, **options):
        seen.append(options)
        return original(name, logp, old, advantages, mask, **options)

    monkeypatch.setattr(objectives_module, "policy_loss", capture)
    loss = trainer._compute_loss(trainer.model, batch)
    assert torch.isfinite(loss)
    options = seen[0]
    assert (
        options["factor"] == "entropy" and options["vocab_size"] == trainer.model.config.vocab_size
    )
    prompts = rows(batch["prompt_ids"], batch["prompt_mask"])
    completions = rows(batch["completion_ids"], batch["completion_mask"])
    mask = batch["completion_mask"].bool()
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        ids = torch.tensor([p + c])
        with torch.no_grad():
            logits = trainer.model(input_ids=ids).logits[0, len(p) - 1 : -1].float()
        probs = torch.softmax(logits / config.temperature, dim=-1)
        entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)  # (len(c),)
        torch.testing.assert_close(options["entropy"][i][mask[i]], entropy, atol=1e-4, rtol=1e-4)
