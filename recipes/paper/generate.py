"""Writes the BiCC paper's Table 2 runs as launch recipes (recipes/paper/{trl,verl}/).

BiCC paper ("When Right Meets Wrong: Bilateral Context Conditioning with Reward-Confidence
Correction for GRPO"), Table 2: Qwen3-4B-Instruct-2507 and Phi-4-mini-instruct, each base
method with BiCC and with RCC; Table 4: AdamW lr 1e-6 (0.9, 0.999), weight decay 0.01,
gradient clipping 1.0, cosine schedule 100 warm-up / 3000 steps; Table 5: Dr.GRPO KL 0.01
to the frozen initial policy, DAPO clip (0.2, 0.28); Table 3: context ratio 0.4; Table 6:
evaluation on MATH-500, AMC 2023, AIME 2024, AIME 2025, avg@32 (seeds 0-31), temperature
0.6, top-p 0.95, 4096 tokens. Training data DAPO-Math-17k, G = 8 (the issue's summary of
the paper). What the paper leaves out (prompts per step, completion budget in training) is
taken from this repository's GPU recipes and named in each file's header.

    python recipes/paper/generate.py          # rewrite the files (tests check they match)
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
RECIPES = HERE.parent
MODELS = {
    "qwen3-4b": "Qwen/Qwen3-4B-Instruct-2507",
    "phi4-mini": "microsoft/Phi-4-mini-instruct",
}
DATASET = "BytedTsinghua-SIA/DAPO-Math-17k"
# DAPO-Math-17k's layout (verl's): prompt a list of chat messages (the problem with DAPO's
# own instruction), answer in the nested reward_model.ground_truth, id in extra_info.index.
DATA_FIELDS = {
    "prompt_field": "prompt",
    "answer_field": "reward_model.ground_truth",
    "id_field": "extra_info.index",
}
BENCHMARKS = "math500,amc23,aime24,aime25"
METHODS = ("grpo", "dr_grpo", "dapo", "gmpo", "gspo")
ADDITIONS = ("bicc", "rcc")
TRL_GPUS, VERL_GPUS = 8, 16
# The reward's extraction (rewards/extract.py) against DAPO-Math-17k's own instruction.
REWARD_NOTE = (
    "Reward: math_verify reads the last line 'Answer: X' that DAPO-Math-17k's prompts ask",
    "for (when a completion has no <answer> tag and no \\boxed{}, which come first;",
    "src/contrastive_rlvr/rewards/extract.py), and checks it with math-verify.",
)

# GPU-hours, an ESTIMATE (nothing here was run on a GPU), worked out as
#   steps x (generation + training) per step x GPUs, with
#   completions a step = prompts a step x G; tokens = completions x mean length;
#   generation at GEN_TOKENS_PER_GPU_S tokens/s per GPU (vLLM, 4B model, bf16);
#   training = 8 x params x tokens FLOPs (forward + backward of the policy, 6N, plus the
#   old/reference no-grad forwards, 2N) at MFU x PEAK_FLOPS per GPU;
#   BiCC: the loss forward also reads ~0.4 x (prompt + budget) context tokens a row, packed
#   (about +25% training FLOPs on the conditioned pass, docs/performance.md).
PROMPTS_PER_STEP = 128
G = 8
MEAN_COMPLETION = 1500  # tokens; an assumption for instruct models on competition math
PARAMS = {"qwen3-4b": 4.0e9, "phi4-mini": 3.8e9}
GEN_TOKENS_PER_GPU_S = 5000.0
PEAK_FLOPS, MFU = 989e12, 0.35  # H100/H200 bf16 dense peak, assumed utilisation
STEPS = 3000


def gpu_hours(model: str, addition: str) -> tuple[float, str]:
    tokens = PROMPTS_PER_STEP * G * MEAN_COMPLETION
    gen_s = tokens / GEN_TOKENS_PER_GPU_S  # GPU-seconds a step
    extra = 1.25 if addition == "bicc" else 1.0
    train_s = 8 * PARAMS[model] * tokens * extra / (MFU * PEAK_FLOPS)
    hours = STEPS * (gen_s + train_s) / 3600
    working = (
        f"{STEPS} steps x ({PROMPTS_PER_STEP} prompts x G={G} x {MEAN_COMPLETION} tokens = "
        f"{tokens / 1e6:.2f}M tokens: generation {gen_s:.0f} GPU-s at "
        f"{GEN_TOKENS_PER_GPU_S:.0f} tok/s/GPU + training {train_s:.0f} GPU-s at 8 x "
        f"{PARAMS[model] / 1e9:.1f}B x tokens{' x 1.25 (BiCC context)' if extra > 1 else ''}"
        f" FLOPs, {MFU:.0%} of {PEAK_FLOPS / 1e12:.0f} TFLOP/s)"
    )
    return hours, working


def eval_command(model_key: str, run_dir: str) -> str:
    return (
        f"contrastive-rlvr eval --model {run_dir} --benchmarks {BENCHMARKS} --n 32 "
        f"--temperature 0.6 --top-p 0.95 --max-new-tokens 4096 --backend vllm "
        f"--output-dir {run_dir}/eval   # base model: --model {MODELS[model_key]}"
    )


def header(lines: list[str]) -> str:
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def trl_recipe(model_key: str, method: str, addition: str) -> tuple[str, dict]:
    base = yaml.safe_load((RECIPES / "trl" / "grpo_bicc_rcc.yaml").read_text())
    name = f"{method}_{addition}_{model_key}"
    run_dir = f"runs/paper/{name}"
    cfg = copy.deepcopy(base)
    cfg.update(model=MODELS[model_key], dataset=DATASET, output_dir=run_dir, recipe=method)
    at = list(cfg).index("dataset") + 1  # the field mapping right after the dataset
    cfg = dict([*list(cfg.items())[:at], *DATA_FIELDS.items(), *list(cfg.items())[at:]])
    cfg["bicc"], cfg["rcc"] = addition == "bicc", addition == "rcc"
    if addition == "bicc":  # the paper's form, not the library's default (docs/bicc.md)
        cfg.update(bicc_form="conditioned", bicc_mix=1.0, bicc_ratio_mode="paper")
    else:
        cfg.pop("bicc_context_ratio")
    if addition != "rcc":
        for key in ("rcc_coef", "rcc_delta"):
            cfg.pop(key)
    # Table 5: Dr.GRPO's KL 0.01 to the frozen initial policy; the others without KL.
    cfg["beta"] = 0.01 if method == "dr_grpo" else 0.0
    # PROMPTS_PER_STEP prompts an optimizer step, as the verl recipes: 8 GPUs x 8 x 16 / G.
    cfg["gradient_accumulation_steps"] = PROMPTS_PER_STEP * G // (TRL_GPUS * 8)
    hours, working = gpu_hours(model_key, addition)
    path = f"recipes/paper/trl/{name}.yaml"
    text = header(
        [
            f"BiCC paper Table 2: {method} + {addition.upper()} on {MODELS[model_key]} (TRL path).",
            f"GPUs: {TRL_GPUS} (one node; accelerate + DeepSpeed ZeRO-2, vLLM colocated).",
            f"GPU-hours: ~{hours:.0f} (an ESTIMATE, not measured: {working}; "
            "recipes/paper/generate.py).",
            "Launch:",
            "  accelerate launch --config_file recipes/trl/accelerate/zero2.yaml \\",
            f"    -m contrastive_rlvr.cli train --config {path}",
            "Smoke (one GPU, 5 steps):",
            f"  contrastive-rlvr train --config {path} --max_steps 5 --warmup_steps 0 \\",
            "    --per_device_train_batch_size 8 --gradient_accumulation_steps 1 "
            "--max_completion_length 512 --save_strategy no",
            "Evaluate (the paper's Table 2 columns, avg@32):",
            f"  {eval_command(model_key, run_dir)}",
            "Data: DAPO-Math-17k as it is on the Hub (or a local copy: --dataset FILE.parquet);",
            "its prompt is a chat message list, the answer the nested reward_model.ground_truth",
            "(answer_field below), the id extra_info.index.",
            *REWARD_NOTE,
        ]
    )
    return path, {"text": text, "config": cfg}


def verl_recipe(model_key: str, method: str, addition: str) -> tuple[str, dict]:
    base = yaml.safe_load((RECIPES / "verl" / "grpo_bicc_rcc.yaml").read_text())
    name = f"{method}_{addition}_{model_key}"
    cfg = copy.deepcopy(base)
    cfg["data"]["train_files"] = "${oc.env:HOME}/data/dapo-math-17k/train.parquet"
    actor = cfg["actor_rollout_ref"]["actor"]
    cfg["actor_rollout_ref"]["model"]["path"] = MODELS[model_key]
    loss = actor["policy_loss"]
    loss["loss_mode"] = f"crlvr_{method}"
    loss["bicc"] = addition == "bicc"
    # The paper's form, not the library's default (docs/bicc.md).
    loss.pop("bicc_distill_weight", None)
    loss["bicc_form"], loss["bicc_ratio_mode"] = "conditioned", "paper"
    if method == "dapo":
        actor["clip_ratio_high"] = 0.28
        actor["loss_agg_mode"] = "token-mean"
    if method == "dr_grpo":
        actor["loss_agg_mode"] = "seq-mean-token-sum-norm"
    # Table 5: KL 0.01 for Dr.GRPO; RCC needs verl's reference log-probs, which the KL loss
    # makes verl compute (coefficient 0 when the method has no KL).
    actor["use_kl_loss"] = method == "dr_grpo" or addition == "rcc"
    actor["kl_loss_coef"] = 0.01 if method == "dr_grpo" else 0.0
    std = "dr_grpo" if method == "dr_grpo" else "grpo"
    if addition == "rcc":
        cfg["algorithm"]["adv_estimator"] = "crlvr_dr_grpo_rcc" if std == "dr_grpo" else "crlvr_rcc"
    else:
        cfg["algorithm"]["adv_estimator"] = f"crlvr_{std}"
    cfg["trainer"]["experiment_name"] = f"paper-{name}"
    hours, working = gpu_hours(model_key, addition)
    path = f"recipes/paper/verl/{name}.yaml"
    text = header(
        [
            f"BiCC paper Table 2: {method} + {addition.upper()} on {MODELS[model_key]} "
            "(verl 0.9.1).",
            f"GPUs: {VERL_GPUS} (2 nodes x 8; vLLM rollouts, FSDP).",
            f"GPU-hours: ~{hours:.0f} (an ESTIMATE, not measured: {working}; "
            "recipes/paper/generate.py).",
            "Launch:",
            "  python -m verl.trainer.main_ppo --config-path=$PWD/recipes/paper/verl "
            f"--config-name={name}",
            "Smoke (one GPU, 5 steps): the launch line plus",
            "  trainer.nnodes=1 trainer.n_gpus_per_node=1 trainer.total_training_steps=5 "
            "data.train_batch_size=8 \\",
            "  actor_rollout_ref.actor.ppo_mini_batch_size=8 data.max_response_length=512",
            "Evaluate (the paper's Table 2 columns, avg@32; the HF checkpoint verl saves):",
            f"  {eval_command(model_key, f'checkpoints/contrastive-rlvr/paper-{name}/hf')}",
            *REWARD_NOTE,
        ]
    )
    return path, {"text": text, "config": cfg}


def all_recipes() -> dict[str, str]:
    """Path (relative to the repository) -> file text."""
    out = {}
    for model_key in MODELS:
        for method in METHODS:
            for addition in ADDITIONS:
                for build in (trl_recipe, verl_recipe):
                    path, item = build(model_key, method, addition)
                    body = yaml.safe_dump(item["config"], sort_keys=False, width=100)
                    out[path] = item["text"] + body
    return out


if __name__ == "__main__":
    root = RECIPES.parent
    for rel, text in all_recipes().items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    print(f"wrote {len(all_recipes())} recipes under recipes/paper/")
