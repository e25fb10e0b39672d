"""Checks of a training run that need the file system or imports but no model: run
before any weights load.

The config's values themselves (numeric ranges, choices, ``--dataset`` given with
the embedded model) are checked when :class:`~.config.RLVRConfig` is built. What is
left for :func:`preflight` needs more than the values: the output directory can be
made and written, the model path exists (or the Hub id is cached when offline), the
dataset file reads and has the needed fields, every reward import path resolves. It
raises :class:`UserError` with one line naming the field or file, the value and the
fix, and returns what it had to load to check (the prompt rows, the reward
functions), so the run does not load them twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError
from ..input_checks import (
    check_model_path,
    check_not_model_folder,
    check_output_dir,
    hub_offline,
)
from ..trainer.reward_guards import guard_reward


@dataclass
class PreflightResult:
    """What the checks loaded: reuse it instead of loading again."""

    prompts: Any = None  # data.LoadedPrompts of a custom dataset (rows in the file's order)
    shuffled: Any = None  # its rows in the seeded order: shuffled once, here
    split: Any = None  # data.HeldoutSplit of the shuffled rows (by problem)
    heldout_note: str | None = None  # the line saying a small file's held-out size was fitted
    rewards: list[Any] = field(default_factory=list)  # resolved and guarded, once
    reward_names: list[str] = field(default_factory=list)


def check_report_to(report_to: Any) -> None:
    """Every ``report_to`` integration named is installed (transformers would fail only
    when the Trainer is built, after the model loaded)."""
    from transformers.integrations import get_available_reporting_integrations

    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    available = get_available_reporting_integrations()
    missing = [n for n in names if n not in ("none", "all") and n not in available]
    if missing:
        raise UserError(
            f"report_to={names}: {', '.join(missing)} is not installed (installed: "
            f"{', '.join(available) or 'none'}); install it, or set report_to=none"
        )


def check_push_to_hub(config: Any) -> None:
    """``push_to_hub=true``: the upload at the end of the run can happen (not offline, a
    token the Hub accepts), checked now rather than when the Trainer creates the repository
    after the model loaded."""
    if not getattr(config, "push_to_hub", False):
        return
    keep = "or set push_to_hub=false (the final model is saved in output_dir either way)"
    if hub_offline():
        raise UserError(
            f"push_to_hub=true but HF_HUB_OFFLINE is set, so the run could not upload its "
            f"model; unset HF_HUB_OFFLINE, {keep}"
        )
    from huggingface_hub import HfApi, get_token

    token = config.hub_token or get_token()
    if not token:
        raise UserError(
            "push_to_hub=true but no Hugging Face token is set; log in (hf auth login), set "
            f"HF_TOKEN or hub_token, {keep}"
        )
    try:
        HfApi().whoami(token=token)
    except Exception as err:
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        raise UserError(
            f"push_to_hub=true but the Hub cannot be reached with this token "
            f"({type(err).__name__}: {reason}); check the network and the token, {keep}"
        ) from err


def check_quantization(config: Any) -> None:
    """``load_in_4bit`` / ``load_in_8bit`` (TRL's ModelConfig): bitsandbytes is installed,
    checked now rather than inside ``from_pretrained`` after the data and rewards loaded."""
    import importlib.util

    asked = [f for f in ("load_in_4bit", "load_in_8bit") if getattr(config, f, False)]
    if asked and importlib.util.find_spec("bitsandbytes") is None:
        raise UserError(
            f"{asked[0]}=true needs bitsandbytes, which is not installed; pip install "
            f"bitsandbytes (quantized training runs on a CUDA GPU), or set {asked[0]}=false"
        )


#: Options that need a package this project does not install, as ``(field, the value that
#: needs it, import name, pip name, what to set instead)``; checked at start, before any
#: model loads, since each package is otherwise imported only inside TRL or transformers
#: after the model loaded (vLLM's ImportError came as a traceback after the load).
OPTIONAL_PACKAGES: tuple[tuple[str, Any, str, str, str], ...] = (
    ("use_vllm", True, "vllm", "vllm", "use_vllm=false (generation with transformers)"),
    ("use_peft", True, "peft", "peft", "use_peft=false (full fine-tuning)"),
    ("use_liger_kernel", True, "liger_kernel", "liger-kernel", "use_liger_kernel=false"),
    ("attn_implementation", "flash_attention_2", "flash_attn", "flash-attn",
     "attn_implementation=sdpa"),
    ("attn_implementation", "flash_attention_3", "flash_attn_interface", "flash-attn-3",
     "attn_implementation=sdpa"),
)  # fmt: skip


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install counts as missing
        return False


def missing_packages(config: Any) -> list[str]:
    """One sentence per option ``config`` sets whose package is not installed (the
    options of :data:`OPTIONAL_PACKAGES`, a DeepSpeed config; a PEFT adapter folder as
    the model is :func:`check_model_path`'s); empty when every one is there."""
    problems = []
    for name, value, module, pip, instead in OPTIONAL_PACKAGES:
        if getattr(config, name, None) == value and not _installed(module):
            problems.append(
                f"{name}={json_text(value)} needs {pip}, which is not installed: pip install "
                f"{pip}, or set {instead}"
            )
    if getattr(config, "deepspeed", None) and not _installed("deepspeed"):
        problems.append(
            f"deepspeed={config.deepspeed!r} needs deepspeed, which is not installed: pip "
            "install deepspeed, or drop --deepspeed"
        )
    return problems


def json_text(value: Any) -> str:
    """A value as written on the command line (``true``, not ``True``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def check_optional_packages(config: Any) -> None:
    """Every optional package an option of ``config`` needs is installed; else one
    :class:`UserError` with one sentence per missing package."""
    problems = missing_packages(config)
    if problems:
        raise UserError("\n".join(problems))


def load_dataset_of(config: Any) -> Any:
    """The prompt dataset ``config`` names, read with its field mapping and split
    (:func:`~contrastive_rlvr.data.load_prompts`)."""
    from ..data import load_prompts

    # OC-GRPO's solution column may be a dotted path too: copied to a column of that name.
    solution = getattr(config, "oc_solution_column", "")
    return load_prompts(
        config.dataset,
        prompt_field=config.prompt_field,
        answer_field=config.answer_field,
        id_field=config.id_field,
        nested_columns=[solution] if config.oc_grpo and "." in solution else [],
        answer_format=config.answer_format,
        split=config.dataset_train_split,
        hub_config=config.dataset_config,
        skip_bad_rows=config.skip_bad_rows,
    )


def reading_options(config: Any) -> dict[str, bool]:
    """How the run's ``math_verify`` reward reads answers (``answer_line``,
    ``answer_phrase``, ``last_number_fallback``: eval's options, same defaults); refuses
    a reading set away from its default when no reward would read it."""
    from ..rewards import READING_FIELDS, AnswerReading

    options = {name: bool(getattr(config, name)) for name in READING_FIELDS}
    default = AnswerReading()
    changed = [f"{k}={v}" for k, v in options.items() if v != getattr(default, k)]
    if changed and "math_verify" not in config.rewards:
        raise UserError(
            f"{', '.join(changed)} set, but rewards={config.rewards} has no math_verify, the "
            "reward these options configure; add math_verify or drop the options"
        )
    return options


def preflight(config: Any, *, training: bool = True) -> PreflightResult:
    """Every check of a training run that needs no model; raises :class:`UserError`.
    ``training=False`` (``premise``, which trains nothing): the held-out split and the
    rows one generation batch needs are not checked, and a split that would leave no
    training rows holds nothing out. The default ``heldout_size`` is fitted to a small
    file here (:func:`~contrastive_rlvr.data.split_for`; the result's ``heldout_note``
    says so); the split holds the size used."""
    from ..data import split_for, split_heldout
    from ..rewards import resolve_reward

    check_output_dir(config.output_dir)
    check_not_model_folder(config.model, config.output_dir, config.overwrite_output_dir)
    check_report_to(config.report_to)
    check_push_to_hub(config)
    check_quantization(config)
    check_optional_packages(config)
    if config.merge_adapter and not config.use_peft:
        raise UserError(
            "merge_adapter=true merges a LoRA adapter, but this run trains none: set "
            "use_peft=true (or pass peft_config to RLVRTrainer in a script), or drop "
            "merge_adapter"
        )
    result = PreflightResult()
    if config.model == "embedded":  # its task and reward come with it (checked by the config)
        return result
    if config.dataset is None:
        raise UserError(
            f"dataset=None is invalid: model={config.model!r} needs a prompt dataset (a "
            ".jsonl/.parquet file or a Hugging Face dataset name); only model='embedded' "
            "brings its own task"
        )
    if not config.rewards:
        raise UserError("rewards=[] is invalid: give at least one reward function")
    check_model_path(config.model)
    try:
        prompts = load_dataset_of(config)
    except ValueError as err:
        raise UserError(f"dataset={config.dataset!r}: {err}") from err
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"dataset={config.dataset!r} cannot be read: {err}") from err
    # The held-out split is by problem: rows repeating a prompt stay on one side.
    needed = config.generation_batch_size // config.num_generations if training else 1
    shuffled = prompts.dataset.shuffle(seed=config.seed)
    split, size, result.heldout_note = split_for(shuffled, config.heldout_size, needed)
    if not split.train and not training:  # premise: every prompt may be measured
        split, size = split_heldout(shuffled, 0), 0
        result.heldout_note = "premise: every prompt measured (no held-out split)"
    if not split.train:
        distinct = f", {split.problems} distinct prompts" if split.repeats else ""
        raise UserError(
            f"heldout_size={size} leaves no training rows in {config.dataset} "
            f"({len(prompts.dataset)} rows{distinct}); lower heldout_size (0: no held-out "
            "scoring)"
        )
    strategy = str(getattr(config.eval_strategy, "value", config.eval_strategy))
    if size == 0 and strategy != "no":
        raise UserError(
            f"eval_strategy={strategy} evaluates on the held-out rows, but "
            "heldout_size=0 holds none out; set heldout_size above 0, or eval_strategy=no"
        )
    result.prompts, result.shuffled, result.split = prompts, shuffled, split
    reading = reading_options(config)
    for name in config.rewards:
        try:
            reward = resolve_reward(name, **(reading if name == "math_verify" else {}))
        except (ValueError, KeyError) as err:
            raise UserError(f"rewards: {err}") from err
        guard = {"on_nonfinite": config.nonfinite_rewards, "timeout": config.reward_timeout}
        result.rewards.append(guard_reward(reward, **guard))
        result.reward_names.append(name)
    weights = config.reward_weights
    if weights is not None and not config.overlong_punishment:
        if len(weights) != len(config.rewards):
            raise UserError(
                f"reward_weights={weights} has {len(weights)} entries for "
                f"{len(config.rewards)} reward functions {config.rewards}: give one per function"
            )
    # TRL's sampler draws whole batches of distinct prompts and drops a partial one: with
    # fewer training rows than one batch needs, the run would train 0 steps.
    rows = len(split.train)
    if training and rows < needed:
        raise UserError(
            f"dataset={config.dataset!r} leaves {rows} training rows after heldout_size="
            f"{size}, fewer than the {needed} distinct prompts one generation "
            f"batch needs (generation_batch_size={config.generation_batch_size} / "
            f"num_generations={config.num_generations}): add rows, or lower heldout_size (0: "
            "no held-out scoring) or the batch size"
        )
    return result
