"""One training run end to end: model and data, held-out accuracy before, RL, accuracy after."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import AutoModelForCausalLM
from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerState

from ..checkpoints import (
    checkpoint_problems,
    list_checkpoints,
    newest_complete_checkpoint,
    refused_pickles_as_user_error,
    weights_problems,
)
from ..errors import UserError
from ..logs import follow_log_level
from .callbacks import RichProgress
from .config import RLVRConfig
from .config_compare import config_differences
from .folder_lock import OutputDirLock
from .guards import AllUpdatesSkipped, NoTrainingSteps, guard_reward
from .model_card import MERGED_DIR, save_merged
from .model_options import model_load_kwargs, peft_config_of
from .preflight import PreflightResult, preflight
from .rlvr_trainer import RLVRTrainer

logger = logging.getLogger(__name__)
#: What a run says once at its start (field mapping, held-out reward): shown at the
#: default log level (INFO here) unless the run's log_level asks for fewer lines.
start_log = logging.getLogger("contrastive_rlvr.start")

SFT_DIR = "sft-model"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
#: The identity of the data a run trained on (:func:`~contrastive_rlvr.data.file_fingerprint`),
#: written with config.yaml when the run starts, checked by a resume and by compare.
DATA_FILE = "data.json"
#: Files and folders of a run in its output directory (``sft-model`` is a reusable
#: warm start, not a run: compare copies it in before the run starts).
RUN_FILES = (
    CONFIG_FILE, DATA_FILE, SUMMARY_FILE, "metrics.jsonl", "deltas.jsonl", "diagnostics.jsonl"
)  # fmt: skip
#: The first line of a config.yaml a run wrote: a config.yaml without it is the user's
#: own file, which no run replaces or removes.
RUN_CONFIG_HEADER = "# contrastive-rlvr train: the resolved config of the run in this folder"
#: What this project puts in a run's folder before (or without) the run's config.yaml:
#: the embedded warm start (built there, or copied in by compare) and compare's notes and
#: log. A folder holding only these is free for a fresh run.
PREPARED_ENTRIES = frozenset(
    {SFT_DIR, f"{SFT_DIR}.partial", "train.log", "error.txt", "interrupted.txt"}
)


def save_resolved_config(config: RLVRConfig, path: Path) -> None:
    """Write every field of the resolved config as YAML (TrainingArguments.to_dict
    turns enums into their values and hides tokens), under :data:`RUN_CONFIG_HEADER`."""
    path.write_text(RUN_CONFIG_HEADER + "\n" + yaml.safe_dump(config.to_dict(), sort_keys=True))


def _written_by_a_run(path: Path) -> bool:
    with path.open(errors="replace") as f:
        return f.readline().rstrip("\n") == RUN_CONFIG_HEADER


def warm_start_problems(sft_dir: Path) -> list[str]:
    """Why ``sft_dir`` is not a whole saved warm start (empty: it is): its config, its
    settings record and its weights, checked from headers as checkpoints are."""
    from ..embedded import SETTINGS_FILE

    missing = [n for n in ("config.json", SETTINGS_FILE) if not (sft_dir / n).is_file()]
    return [f"{n} is missing" for n in missing] + weights_problems(sft_dir)


def _embedded(config: RLVRConfig, out: Path) -> dict[str, Any]:
    """The embedded default's model (warm-started once, then reused), task and reward."""
    from ..embedded import (
        EmbeddedSettings,
        TaskConfig,
        WarmStartConfig,
        arithmetic_reward,
        build_embedded_default,
        heldout_correctness,
        load_char_tokenizer,
        make_datasets,
    )

    task = TaskConfig(terms=config.embedded_terms)
    sft_dir = out / SFT_DIR
    problems = warm_start_problems(sft_dir) if sft_dir.exists() else ["absent"]
    if problems != ["absent"] and problems:
        # A save cut short (disk full, a kill) must not be reused on every rerun.
        logger.warning("%s is not whole (%s): building it again", sft_dir, "; ".join(problems))
    if problems:
        settings = EmbeddedSettings(
            seed=config.seed,
            task=task,
            bicc_phrases=config.embedded_bicc_phrases,
            sft=WarmStartConfig(
                context_frac=config.embedded_sft_context_frac,
                context_target=config.embedded_sft_context_target,
                # Read only by a reading warm start (a share of it > 0).
                **(
                    embedded_sft_context_budget(config)
                    if config.embedded_sft_context_frac > 0
                    else {"context_budget": None}
                ),
                context_truncation=config.bicc_truncation,
                context_placement=embedded_sft_context_placement(config),
                context_max_attempts=max(config.num_generations - 1, 1),
                context_attempts=config.embedded_sft_context_attempts,
                context_max_new_tokens=config.max_completion_length,
                context_temperature=config.temperature,
            ),
        )
        # Built aside and renamed into place, so that sft-model/ is whole or absent.
        partial = out / f"{SFT_DIR}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        build_embedded_default(partial, settings=settings, sft_steps=config.embedded_sft_steps)
        shutil.rmtree(sft_dir, ignore_errors=True)
        os.replace(partial, sft_dir)
    else:
        _warn_if_other_warm_start(config, sft_dir)
    tokenizer = load_char_tokenizer(sft_dir)
    with _init_kwargs_as_user_error(config):
        model = AutoModelForCausalLM.from_pretrained(sft_dir, **model_load_kwargs(config))
    train, heldout = make_datasets(task)
    if config.eval_limit is not None:
        heldout = heldout.select(range(min(config.eval_limit, len(heldout))))

    def evaluate(m, label: str | None = None) -> list[list[bool]]:
        # (The embedded task's samples are not written: its held-out set is generated.)
        return heldout_correctness(m, tokenizer, heldout, n=config.eval_n, seed=config.seed)

    return dict(
        model=model,
        tokenizer=tokenizer,
        train=train,
        heldout=heldout,
        rewards=[
            guard_reward(
                arithmetic_reward,
                on_nonfinite=config.nonfinite_rewards,
                timeout=config.reward_timeout,
            )
        ],
        evaluate=evaluate,
    )


@contextlib.contextmanager
def _init_kwargs_as_user_error(config: RLVRConfig):
    """A ``model_init_kwargs`` key the model does not take, as one line (raised when the
    model class is built, before any weight is read)."""
    from .model_options import init_kwargs_error

    try:
        yield
    except TypeError as err:
        user_error = init_kwargs_error(config, err)
        if user_error is None:
            raise
        raise user_error from err


def check_finite_weights(model: Any, name: str) -> None:
    """Refuse a model with a NaN or infinite weight: sampling from it fails deep inside
    ``generate`` (or trains on garbage); named here with the first bad tensor."""
    for tensor_name, param in model.named_parameters():
        if param.is_floating_point() and not bool(torch.isfinite(param).all()):
            bad = int((~torch.isfinite(param)).sum())
            raise UserError(
                f"model={name!r}: its weight {tensor_name} holds {bad} NaN or infinite "
                f"value(s) of {param.numel()}; the checkpoint is damaged (a diverged run or "
                "a bad conversion): train from an earlier, finite checkpoint"
            )


def embedded_sft_context_placement(config: RLVRConfig) -> str:
    """Where a run of ``config`` puts BiCC's context on the embedded task's text prompts
    (``auto`` is ``after_prompt`` there), so the reading warm start puts it there too."""
    from ..algorithms.bicc import resolve_placement

    if config.bicc_placement == "user_turn":
        raise UserError(
            "bicc_placement=user_turn needs chat prompts; the embedded task's are plain text: "
            "use after_prompt, before_prompt or auto"
        )
    return resolve_placement(config.bicc_placement, False)


def embedded_sft_context_budget(config: RLVRConfig) -> dict:
    """The BiCC context budget a run of ``config`` on the embedded model gives, so that the
    reading warm start's contexts are cut as RL will cut them: ``context_budget`` with the
    task's longest prompt (every prompt of one length has the same characters count) and
    the embedded model's positions; with ``bicc_framing_budget='outside'`` the positions
    cap the whole context (``context_room``). WarmStartConfig's ``context_*`` fields."""
    from ..algorithms import context_budget
    from ..algorithms.bicc import context_room
    from ..embedded import TaskConfig, bicc_phrases, build_char_tokenizer, make_datasets
    from ..embedded.model import DEFAULT_MAX_POSITIONS

    tokenizer = build_char_tokenizer(bicc_phrases() if config.embedded_bicc_phrases else ())
    train, _ = make_datasets(TaskConfig(terms=config.embedded_terms))
    longest = max(len(ids) for ids in tokenizer(list(train["prompt"][:1000]))["input_ids"])
    inside = config.bicc_framing_budget == "inside"
    budget = context_budget(
        config.bicc_context_ratio,
        longest_prompt=longest,
        max_completion_length=config.max_completion_length,
        max_seq_len=config.bicc_max_seq_len,
        max_positions=DEFAULT_MAX_POSITIONS if inside else None,
    )
    room = None
    if not inside:
        room = context_room(longest, config.max_completion_length, DEFAULT_MAX_POSITIONS)
    if budget < 1 or (room is not None and room < 1):
        raise UserError(
            f"embedded_sft_context_frac={config.embedded_sft_context_frac} needs room for "
            f"BiCC's context, but the longest prompt ({longest} tokens) plus "
            f"max_completion_length={config.max_completion_length} leave none of "
            f"bicc_max_seq_len={config.bicc_max_seq_len} (positions "
            f"{DEFAULT_MAX_POSITIONS}) at bicc_context_ratio={config.bicc_context_ratio}: "
            "lower max_completion_length or raise bicc_max_seq_len"
        )
    framing = config.bicc_framing_budget
    return {"context_budget": budget, "context_framing": framing, "context_room": room}


def _warn_if_other_warm_start(config: RLVRConfig, sft_dir: Path) -> None:
    """A reused ``sft-model`` (a rerun, or compare's cache) built with other settings than
    this config's is used as it is, but said (remove it to build it anew)."""
    from ..embedded import SETTINGS_FILE

    record_file = sft_dir / SETTINGS_FILE
    if not record_file.exists():
        return
    record = json.loads(record_file.read_text())
    built = {
        "seed": record.get("seed"),
        "embedded_terms": record.get("task", {}).get("terms"),
        "embedded_sft_context_frac": record.get("sft", {}).get("context_frac", 0.0),
        "embedded_sft_context_target": record.get("sft", {}).get("context_target", "avoid"),
        "embedded_sft_context_attempts": record.get("sft", {}).get(
            "context_attempts", "demonstrator"
        ),
        "embedded_bicc_phrases": record.get("bicc_phrases", False),
    }
    wanted = {
        "seed": config.seed,
        "embedded_terms": config.embedded_terms,
        "embedded_sft_context_frac": config.embedded_sft_context_frac,
        "embedded_sft_context_target": config.embedded_sft_context_target,
        "embedded_sft_context_attempts": config.embedded_sft_context_attempts,
        "embedded_bicc_phrases": config.embedded_bicc_phrases,
    }
    diffs = [f"{k}: {built[k]!r} there, {v!r} here" for k, v in wanted.items() if built[k] != v]
    if diffs:
        logger.warning(
            "reusing the warm start %s built with other settings (%s); remove it to build "
            "it with this config's",
            sft_dir,
            "; ".join(diffs),
        )


def _custom(config: RLVRConfig, checked: PreflightResult | None = None) -> dict[str, Any]:
    """A Hugging Face (or GGUF-alias) model on a prompt dataset with the configured rewards;
    held-out avg@n on ``heldout_size`` seeded problems of the dataset kept out of training
    (split by prompt, :func:`~contrastive_rlvr.data.split_heldout`: a problem the dataset
    repeats is on one side only).

    The prompts go to TRL as TRL takes them (a string, or a list of messages whose chat
    template TRL applies once); every column of the dataset stays, so the reward functions
    and stages get each one, in training (TRL passes them as keyword arguments) and in the
    held-out evaluation (passed the same way here)."""
    from ..data import (
        is_conversational_prompt,
        resolve_instruction,
        split_heldout,
        with_instruction,
    )
    from ..models import load_model_and_tokenizer
    from .model_options import model_load_kwargs
    from .preflight import load_dataset_of

    checked = checked if checked is not None else preflight(config)
    with _init_kwargs_as_user_error(config):
        model, tokenizer = load_model_and_tokenizer(config.model, **model_load_kwargs(config))
    check_finite_weights(model, config.model)
    model.train()
    loaded = checked.prompts or load_dataset_of(config)
    if loaded.skipped:
        logger.warning("%s: skipped %d malformed rows", loaded.source, loaded.skipped)
    data = loaded.dataset.shuffle(seed=config.seed)
    split = checked.split or split_heldout(data, config.heldout_size)
    if not split.train:
        raise ValueError(
            f"heldout_size={config.heldout_size} leaves no training rows in {config.dataset} "
            f"({len(data)} rows, {split.problems} distinct prompts)"
        )
    if split.repeats:
        logger.warning(
            "%s: %d of %d rows repeat an earlier row's prompt (%d distinct prompts): held out "
            "%d prompts, each evaluated once; their %d other rows are left out of training",
            loaded.source, split.repeats, len(data), split.problems, len(split.heldout),
            split.dropped,
        )  # fmt: skip
    has_template = getattr(tokenizer, "chat_template", None) is not None
    conversational = is_conversational_prompt(data[0]["prompt"])
    if conversational and not (has_template and config.chat_template):
        why = "chat_template=false" if has_template else "the tokenizer has no chat template"
        raise UserError(
            f"dataset={config.dataset!r} holds conversational prompts (message lists) but "
            f"{why}; give a tokenizer with a chat template, or string prompts"
        )
    chat = config.chat_template and has_template
    instruction = resolve_instruction(config.instruction, conversational)
    if chat:
        check_chat_roles(config, tokenizer, loaded.dataset, instruction)
    data = data.map(lambda row: {"prompt": with_instruction(row["prompt"], instruction, chat=chat)})
    heldout = data.select(split.heldout)
    if config.eval_limit is not None:
        heldout = heldout.select(range(min(config.eval_limit, len(heldout))))
    train = data.select(split.train)
    check_prompt_lengths(config, model, tokenizer, data["prompt"][:PROMPT_LENGTH_SAMPLE])
    rewards = [
        guard_reward(fn, on_nonfinite=config.nonfinite_rewards, timeout=config.reward_timeout)
        for fn in checked.rewards
    ]
    log_field_mapping(loaded)
    which = heldout_reward_index(config)
    start_log.info(
        "held-out avg@%d is scored by reward %r (heldout_reward)",
        config.eval_n, config.rewards[which],
    )  # fmt: skip
    evaluate = _heldout_evaluator(config, tokenizer, heldout, rewards[which], chat=chat)
    return dict(
        model=model,
        tokenizer=tokenizer,
        train=train,
        heldout=heldout,
        rewards=rewards,
        evaluate=evaluate,
    )


def heldout_reward_index(config: RLVRConfig) -> int:
    """The place in ``config.rewards`` of the reward that scores the held-out avg@n:
    ``heldout_reward`` when set; else the only reward; else ``math_verify`` when it is
    among them, else the first that is not ``format`` (a format reward scores how an
    answer is written, not whether it is right)."""
    names = list(config.rewards)
    if config.heldout_reward is not None:
        return names.index(config.heldout_reward)
    if "math_verify" in names:
        return names.index("math_verify")
    return next((i for i, n in enumerate(names) if n != "format"), 0)


def log_field_mapping(loaded: Any) -> None:
    """Which column became the prompt, the answer and the id, and how many answers were
    reduced from GSM8K's ``... #### N`` to N (once, at the start of the run)."""
    used = getattr(loaded, "fields", None) or {}
    if not used:
        return

    def columns(counts: dict[str, int]) -> str:
        return (
            ", ".join(f"{c!r} ({n} rows)" for c, n in counts.items())
            if len(counts) > 1
            else repr(next(iter(counts), None))
        )

    rows = len(loaded.dataset)
    reduced = used.get("reduced", 0)
    start_log.info(
        "%s: prompt <- %s, answer <- %s%s, id <- %s",
        loaded.source,
        columns(used.get("prompt", {})),
        columns(used.get("answer", {})),
        f" ({reduced} of {rows} answers reduced from GSM8K's '... #### N' to N)" if reduced else "",
        repr(used["id"]) if used.get("id") else "the row's position",
    )


def _heldout_evaluator(
    config: RLVRConfig, tokenizer: Any, heldout: Any, reward: Any, *, chat: bool
):
    """Per held-out problem, which of its eval_n samples the held-out reward
    (:func:`heldout_reward_index`) scores correct (summary.json takes avg@n and its
    interval from it), each sample written to ``samples/heldout_<label>.jsonl`` as
    ``eval`` writes its samples (prompt, completion, extracted answer, reward): each
    prompt rendered as TRL
    renders it (its chat template once, with ``chat_template_kwargs``), and the reward
    called as TRL calls it (the raw prompt, the completion as a message list for a
    conversation, every other column as a keyword argument)."""
    from ..generation import HFGenerator

    template_kwargs = config.chat_template_kwargs or {}
    if isinstance(template_kwargs, str):
        template_kwargs = json.loads(template_kwargs)
    prompts = list(heldout["prompt"])
    texts = [
        tokenizer.apply_chat_template(
            p, tokenize=False, add_generation_prompt=True, **template_kwargs
        )
        if isinstance(p, list)
        else p
        for p in prompts
    ]
    columns = [c for c in heldout.column_names if c != "prompt"]

    extract = getattr(reward, "extract", None)  # math_verify: the answer it read
    ids = list(heldout["id"]) if "id" in heldout.column_names else list(range(len(heldout)))

    def evaluate(m, label: str | None = None) -> list[list[bool]]:
        gen = HFGenerator(
            m,
            tokenizer,
            max_new_tokens=config.max_completion_length,
            temperature=config.temperature,
            top_p=config.top_p,
            batch_size=config.per_device_train_batch_size,
            chat=chat,
        )
        samples = [gen.generate(texts, seed=config.seed + k) for k in range(config.eval_n)]
        correct, records = [], []
        n = config.eval_n
        for i, row in enumerate(heldout):
            completions = [samples[k][i] for k in range(n)]
            if isinstance(prompts[i], list):
                completions = [[{"role": "assistant", "content": c}] for c in completions]
            extra = {c: [row[c]] * n for c in columns}
            scores = reward([prompts[i]] * n, completions, **extra)
            # None (not scored) and skip_group's non-finite marker are not correct.
            correct.append([_is_correct(s, config.reward_threshold) for s in scores])
            for k in range(n):
                records.append({
                    "problem_id": str(ids[i]), "seed": config.seed + k, "prompt": texts[i],
                    "gold": row.get("answer"),
                    "answer": extract(samples[k][i]) if callable(extract) else None,
                    "reward": scores[k], "correct": correct[-1][k],
                    "completion": samples[k][i],
                })  # fmt: skip
        if label is not None:
            write_samples(Path(config.output_dir) / "samples" / f"heldout_{label}.jsonl", records)
        return correct

    return evaluate


def settings_line(config: RLVRConfig) -> str:
    """The settings a short run depends on most, in one line for the start of the run
    (the CLI prints it under ``base configuration``): learning rate and schedule with the
    warm-up in steps, BiCC's mix, RCC, and how the reward reads answers."""
    from ..rewards import AnswerReading

    schedule = str(getattr(config.lr_scheduler_type, "value", config.lr_scheduler_type))
    parts = [f"learning_rate {config.learning_rate:g}", f"lr_scheduler_type {schedule}"]
    if schedule not in ("constant", "reduce_lr_on_plateau"):
        if config.max_steps >= 1:
            warmup = config.get_warmup_steps(config.max_steps)
            parts.append(
                f"warm-up {warmup} of {config.max_steps} steps (warmup_steps "
                f"{config.warmup_steps:g})"
            )
        else:
            parts.append(f"warmup_steps {config.warmup_steps:g}")
    parts.append(f"max_steps {config.max_steps}")
    parts.append(f"bicc on (bicc_mix {config.bicc_mix:g})" if config.bicc else "bicc off")
    parts.append("rcc on" if config.rcc else "rcc off")
    if config.model != "embedded":
        parts.append(f"rewards {', '.join(config.rewards)}")
        if "math_verify" in config.rewards:
            reading = AnswerReading(
                answer_line=config.answer_line,
                answer_phrase=config.answer_phrase,
                last_number_fallback=config.last_number_fallback,
            )
            parts.append(f"math_verify reads {reading.formats()}")
        parts.append(f"held-out reward {config.rewards[heldout_reward_index(config)]}")
    return "; ".join(parts)


def write_samples(path: Path, records: list[dict]) -> None:
    """The held-out samples as ``eval`` writes its own (one JSON object a line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")


#: Prompts whose length is checked against the model's positions (the first of the
#: shuffled dataset: tokenizing a huge dataset would cost more than the check is worth).
PROMPT_LENGTH_SAMPLE = 2000


def check_prompt_lengths(config: RLVRConfig, model: Any, tokenizer: Any, prompts: list) -> None:
    """Refuse prompts that with ``max_completion_length`` need more positions than the
    model has (TRL does not cut prompts: the model would run past what it was trained on,
    without a word)."""
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if not isinstance(positions, int) or not prompts:
        return

    def length(prompt: Any) -> int:
        if isinstance(prompt, list):  # chat messages
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True)
            ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        else:
            ids = tokenizer(prompt)["input_ids"]
        return len(ids)

    longest = max(length(p) for p in prompts)
    if longest + config.max_completion_length > positions:
        raise UserError(
            f"dataset={config.dataset!r}: its longest prompt is {longest} tokens, which with "
            f"max_completion_length={config.max_completion_length} needs more than the "
            f"model's {positions} positions (max_position_embeddings); shorten the prompts "
            "or lower max_completion_length"
        )


def check_chat_roles(config: RLVRConfig, tokenizer: Any, dataset: Any, instruction: Any) -> None:
    """Render, with the chat template, the first row of every distinct sequence of roles
    in ``dataset`` (all its rows, in the file's order), as TRL will render each row: a
    template that refuses a role (or its place) stops the run here, naming the row, not
    mid-training when that row's batch comes (the length check samples the first rows
    only)."""
    from ..data import with_instruction

    template_kwargs = config.chat_template_kwargs or {}
    if isinstance(template_kwargs, str):
        template_kwargs = json.loads(template_kwargs)
    first: dict[tuple, int] = {}
    position = 0
    for batch in dataset.select_columns(["prompt"]).iter(batch_size=4096):
        for prompt in batch["prompt"]:
            roles = tuple(m["role"] for m in prompt) if isinstance(prompt, list) else ("user",)
            first.setdefault(roles, position)
            position += 1
    for roles, row in first.items():
        prompt = with_instruction(dataset[row]["prompt"], instruction, chat=True)
        try:
            tokenizer.apply_chat_template(
                prompt, tokenize=False, add_generation_prompt=True, **template_kwargs
            )
        except Exception as err:
            reason = " ".join(str(err).split())[:200] or type(err).__name__
            raise UserError(
                f"dataset={config.dataset!r} row {row + 1} (id {dataset[row]['id']}, roles "
                f"{', '.join(roles)}): the model's chat template refuses it ({reason}); fix "
                "the row's roles, or give a tokenizer whose template takes them"
            ) from err


def _is_correct(score: float | None, threshold: float) -> bool:
    return score is not None and math.isfinite(score) and score > threshold


def load_run_inputs(
    config: RLVRConfig, out: Path, checked: PreflightResult | None = None
) -> dict[str, Any]:
    """Model, tokenizer, train dataset, reward functions and held-out evaluator of a run."""
    if config.model == "embedded":
        return _embedded(config, out)
    return _custom(config, checked)


def holds_run(out: Path) -> list[str]:
    """What of another run ``out`` holds (its config, summary, metrics, checkpoints).

    A run's own config.yaml with nothing else is a start that failed or was stopped
    before its first step: there is nothing to resume or lose, so it holds no run."""
    found = [name for name in RUN_FILES if (out / name).exists()]
    found += [p.name for p in reversed(list_checkpoints(out))]
    started_only = CONFIG_FILE in found and set(found) <= {CONFIG_FILE, DATA_FILE}
    if started_only and _written_by_a_run(out / CONFIG_FILE):
        return []
    return found


def save_data_identity(out: Path, config: RLVRConfig, fingerprint: dict | None) -> None:
    """Record what data the run reads (``data.json``); nothing for the embedded task."""
    if fingerprint is None:
        (out / DATA_FILE).unlink(missing_ok=True)
        return
    record = {"dataset": config.dataset, **fingerprint}
    (out / DATA_FILE).write_text(json.dumps(record, indent=2) + "\n")


def _check_data_unchanged(config: RLVRConfig, out: Path, fingerprint: dict | None) -> None:
    """Refuse a resume whose dataset's content differs from the one the run recorded
    (``data.json``): the rest of the run would train on other data without a word."""
    from ..data import fingerprint_differences

    record_file = out / DATA_FILE
    if fingerprint is None or not record_file.is_file():
        return  # the embedded task, or a run recorded before data.json existed
    try:
        saved = json.loads(record_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        saved = {}
    change = fingerprint_differences(saved if isinstance(saved, dict) else {}, fingerprint)
    if change is None:
        return
    what = f"dataset={config.dataset!r} is not the data the run in {out} trained on ({change})"
    if config.resume_allow_config_change:
        logger.warning("resume: %s; continuing on the new data", what)
        shutil.copyfile(record_file, out / "data.before-resume.json")
        return
    raise UserError(
        f"resume=True but {what}: put the file back as it was, start a new run in another "
        "output_dir, or set resume_allow_config_change=true to continue on the new data"
    )


def foreign_entries(out: Path) -> list[str]:
    """The entries of ``out`` that are not a run's of this project, sorted (empty: the
    folder is absent, empty, holds a run, or holds only what compare and the warm start
    prepare, :data:`PREPARED_ENTRIES`). A folder whose config.yaml a run wrote is a run's
    folder whole: its model files (config.json, tokenizer, README.md) are the run's own."""
    if not out.is_dir():
        return []
    own = out / CONFIG_FILE
    if own.is_file() and _written_by_a_run(own):
        return []
    ours = set(PREPARED_ENTRIES) | set(RUN_FILES)
    ours.update(p.name for p in list_checkpoints(out))
    return sorted(p.name for p in out.iterdir() if p.name not in ours)


def _check_foreign_files(config: RLVRConfig, out: Path, *, may_write: bool) -> None:
    """Refuse a fresh run into a folder holding files no run wrote (the run would replace
    a model card, a model's config and tokenizer with its own) unless
    ``overwrite_output_dir`` is set."""
    foreign = foreign_entries(out)
    if not foreign:
        return
    shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
    if not config.overwrite_output_dir:
        raise UserError(
            f"output_dir={str(out)!r} holds files no run of this project wrote ({shown}); "
            "a run writes its model there (config.json, model.safetensors, the tokenizer "
            "files, README.md) and would replace yours: choose a new or empty output_dir, "
            "or set overwrite_output_dir=true to let it replace them"
        )
    if may_write:
        logger.warning(
            "%s holds files no run wrote (%s); overwrite_output_dir=true: the run's files of "
            "the same names replace them",
            out,
            shown,
        )


def _clear_run(out: Path) -> None:
    """Remove the files of the run in ``out`` (the warm start ``sft-model`` stays)."""
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)
    for ckpt in list_checkpoints(out):
        shutil.rmtree(ckpt)


def _check_config_unchanged(config: RLVRConfig, out: Path) -> None:
    """Refuse a resume whose training fields differ from the run's config.yaml, and one
    whose config.yaml is gone or does not parse (its settings cannot be checked)."""
    saved_file = out / CONFIG_FILE
    allow = "set resume_allow_config_change=true to continue with this config's settings"
    saved = None
    if not saved_file.is_file():
        if not (list_checkpoints(out) or (out / SUMMARY_FILE).exists()):
            return  # nothing to resume: said below
        problem = "is missing"
    else:
        from .parse import YAMLTooLarge, safe_yaml

        try:
            saved = safe_yaml(saved_file.read_text())
            problem = None if isinstance(saved, dict) else "holds no mapping of fields"
        except (yaml.YAMLError, YAMLTooLarge) as err:
            problem = f"does not parse ({' '.join(str(err).split())[:120]})"
    if problem is not None:
        if not config.resume_allow_config_change:
            raise UserError(
                f"resume=True but {saved_file} {problem}, so the run's settings cannot be "
                f"checked against these: put the file back, or {allow}"
            )
        logger.warning("resume: %s %s; continuing with this config", saved_file, problem)
        return
    diffs = config_differences(saved, config.to_dict())
    if not diffs:
        return
    if config.resume_allow_config_change:
        logger.warning("resuming with a changed config: %s", "; ".join(diffs))
        shutil.copyfile(saved_file, out / "config.before-resume.yaml")
        return
    raise UserError(
        f"resume=True with a config that differs from {saved_file} in {len(diffs)} training "
        f"field(s): {'; '.join(diffs)}. Resume with the same settings, or set "
        "resume_allow_config_change=true to continue with the new ones"
    )


def same_finished_run(config: RLVRConfig, out: Path) -> dict | None:
    """The summary of the finished run in ``out`` when ``config`` is that run's config (the
    same command again): it is reported, not refused nor run again. None otherwise (no
    whole summary, a run that stopped with an error, or any training field different)."""
    try:
        summary = json.loads((out / SUMMARY_FILE).read_text())
        saved = yaml.safe_load((out / CONFIG_FILE).read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if not isinstance(summary, dict) or "error" in summary or not isinstance(saved, dict):
        return None
    if not _written_by_a_run(out / CONFIG_FILE) or config_differences(saved, config.to_dict()):
        return None
    return summary


def _at_end(checkpoint: str, config: RLVRConfig) -> bool:
    """Whether ``checkpoint`` is at (or past) the run's last step (max_steps > 0 only)."""
    if config.max_steps < 1:
        return False
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    return int(state["global_step"]) >= config.max_steps


def plan_output_dir(
    config: RLVRConfig, out: Path, *, may_write: bool = True, data: dict | None = None
) -> tuple[str | None, dict | None]:
    """``(checkpoint to resume from, summary of a finished run)`` for ``config``; refuses
    (``UserError``) a fresh run into a directory that holds another run or files no run
    wrote, a resume with a changed config or changed data (``data``: the fingerprint of
    the dataset now, :class:`~contrastive_rlvr.data.LoadedPrompts`), and a resume with no
    complete checkpoint. Nothing is loaded. ``may_write=False`` (processes other than the
    main one): the same answer, and the main process alone removes a run that
    ``overwrite_output_dir`` replaces."""
    if not config.resume:
        own = out / CONFIG_FILE
        if own.is_file() and not _written_by_a_run(own):
            raise UserError(
                f"output_dir={str(out)!r} holds a config.yaml that no run wrote (your own "
                "config file?); a run writes its config.yaml there, so choose another "
                "output_dir or move the file (overwrite_output_dir never replaces it)"
            )
        _check_foreign_files(config, out, may_write=may_write)
        found = holds_run(out)
        if found:
            finished = None if config.overwrite_output_dir else same_finished_run(config, out)
            if finished is not None:  # the same command again (make demo twice)
                return None, finished
            if not config.overwrite_output_dir:
                raise UserError(
                    f"output_dir={str(out)!r} already holds a run ({', '.join(found[:4])}); "
                    "resume it with resume=true, choose another output_dir, or set "
                    "overwrite_output_dir=true to replace it"
                )
            if may_write:
                logger.warning("%s: replacing the run it holds (%s)", out, ", ".join(found))
                _clear_run(out)
        return None, None
    _check_config_unchanged(config, out)
    _check_data_unchanged(config, out, data)
    summary_file = out / SUMMARY_FILE
    if summary_file.exists():
        try:
            summary = json.loads(summary_file.read_text())
        except json.JSONDecodeError:
            logger.warning("%s does not parse: resuming the run", summary_file)
        else:
            if not _extends(config, summary):
                return None, summary
            # max_steps raised past the finished run's (the config check let it through,
            # so resume_allow_config_change is set): train on from its last checkpoint.
            logger.warning(
                "resume: extending the finished run from %s to %d steps (its summary kept "
                "as summary.before-resume.json)",
                summary.get("steps"),
                config.max_steps,
            )
            os.replace(summary_file, out / "summary.before-resume.json")
    named = _named_checkpoint(config)
    if named is not None:
        logger.warning("resume: from %s (resume_from_checkpoint)", named)
        return named, None
    checkpoint, skipped = newest_complete_checkpoint(out)
    if checkpoint is None:
        if not skipped:
            raise UserError(
                f"resume=True but {out} holds no checkpoint-* directory to resume from; "
                "start it without resume"
            )
        detail = "; ".join(f"{p.name}: {', '.join(why)}" for p, why in skipped)
        if all(_weights_only(why) for _, why in skipped):
            raise UserError(
                f"resume=True but the checkpoints in {out} hold the weights only "
                f"(save_only_model=true: {detail}), which a run cannot resume from; to "
                f"go on from {skipped[0][0].name}, train with --model {skipped[0][0]} in "
                "another output_dir (overwrite_output_dir=true would delete these weights)"
            )
        raise UserError(
            f"resume=True but no checkpoint in {out} is complete ({detail}); start the run "
            "again with overwrite_output_dir=true"
        )
    for path, why in skipped:
        logger.warning("resume: skipped incomplete %s (%s)", path.name, "; ".join(why))
    logger.warning("resume: from %s", checkpoint)
    return str(checkpoint), None


def _named_checkpoint(config: RLVRConfig) -> str | None:
    """``resume_from_checkpoint=PATH`` (TRL's option): that checkpoint, refused unless it
    is a whole one; None when no path is named (resume from the newest in output_dir)."""
    named = config.resume_from_checkpoint
    if not named:
        return None
    path = Path(named).expanduser()
    newest = "or true for the newest complete checkpoint in output_dir"
    if not path.is_dir():
        raise UserError(
            f"resume_from_checkpoint={named!r}: no such folder; give a checkpoint-N folder "
            f"of a run, {newest}"
        )
    problems = checkpoint_problems(path)
    if problems:
        raise UserError(
            f"resume_from_checkpoint={named!r} is not complete ({'; '.join(problems)}); give "
            f"another checkpoint, {newest}"
        )
    return str(path)


def _any_step_scored(metrics_file: Path, first: int) -> bool:
    """Whether a step after ``first`` logged a numeric reward (TRL logs None for a step
    whose every reward was None, and metrics.jsonl keeps numbers only). True when there
    is no file to tell (another process writes it, or logging is off)."""
    if not metrics_file.exists():
        return True
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("step", 0) > first]
    return not rows or any(isinstance(r.get("reward"), int | float) for r in rows)


def heldout_score(correct: list[list[bool]]) -> tuple[float, dict]:
    """avg@n of a held-out correctness matrix (problems x samples) and what summary.json
    records with it: the counts behind it and its Wilson interval over problems."""
    from ..algorithms import avg_at_n
    from ..stats import SCORE_INTERVAL_METHOD, score_interval

    value = avg_at_n(correct)
    ci = score_interval([sum(row) / len(row) for row in correct])
    counts = {
        "problems": len(correct),
        "samples": sum(len(row) for row in correct),
        "correct": sum(sum(row) for row in correct),
        "avg_at_n": value,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "level": ci.level,
        "interval": SCORE_INTERVAL_METHOD,
    }
    return value, counts


def _extends(config: RLVRConfig, summary: dict) -> bool:
    """Whether ``config`` asks for more steps than the finished run ``summary`` made."""
    steps = summary.get("steps")
    return (
        "error" not in summary
        and isinstance(steps, int)
        and config.max_steps >= 1
        and config.max_steps > steps
    )


def _weights_only(problems: list[str]) -> bool:
    """A checkpoint whose only problems are the optimizer and scheduler files missing: one
    saved with ``save_only_model=true``."""
    return bool(problems) and all(
        p in ("optimizer.pt is missing", "scheduler.pt is missing") for p in problems
    )


def _distributed_state(config: RLVRConfig):
    """accelerate's process state of the run, as TrainingArguments sets it up (the process
    group of a torchrun launch is made here, as the Trainer would)."""
    _ = config.device  # sets up config.distributed_state
    if config.distributed_state is None:
        from accelerate import PartialState

        return PartialState(cpu=config.use_cpu)
    return config.distributed_state


def _on_main(state: Any, evaluate: Any, model: Any, label: str) -> Any:
    """The held-out evaluation once, on the main process; every process gets its value.
    ``label`` (before, after) names the file of its samples."""
    value = evaluate(model, label=label) if state.is_main_process else None
    if state.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        value = broadcast_object_list([value])[0]
    return value


def train(
    config: RLVRConfig, *, extra_callbacks: list | None = None, progress: bool = True
) -> dict:
    """Run one training job as ``config`` says and return its summary.

    Writes to ``config.output_dir``: ``config.yaml`` (resolved), checkpoints,
    ``metrics.jsonl`` and ``summary.json`` (held-out avg@n before and after RL).
    The folder is locked for the whole run (``folder_lock``): a second run into it
    is refused while this one lives.
    """
    torch.set_num_threads(config.torch_threads)
    out = Path(config.output_dir)
    # Every check that needs no model, before any model loads.
    checked = preflight(config)
    state = _distributed_state(config)
    level = config.get_process_log_level()
    follow_log_level(level)  # --log_level info: the project's INFO
    # The start lines (field mapping, held-out reward) at the default level too.
    start_log.setLevel(min(level, logging.INFO) if level <= logging.WARNING else level)
    # One writer per folder: the main process holds the lock for the whole run (the others
    # only read the folder, after it, and wait for it at each write).
    lock = OutputDirLock(out) if state.is_main_process else contextlib.nullcontext()
    with lock:
        return _train_locked(config, out, checked, extra_callbacks, progress, state)


def _train_locked(
    config: RLVRConfig,
    out: Path,
    checked: PreflightResult,
    extra_callbacks: list | None,
    progress: bool,
    state: Any,
) -> dict:
    # Under several processes (torchrun) every one plans from the folder as it was; only
    # the main process writes it, after all have read it, and builds the embedded warm
    # start while the others wait (they then load it).
    main = state.is_main_process
    data = checked.prompts.fingerprint if checked.prompts is not None else None
    resume, finished = plan_output_dir(config, out, may_write=main, data=data)
    if finished is not None:
        logger.warning(
            "%s: this run finished already (%s); nothing to do (reported below; "
            "overwrite_output_dir=true runs it again)",
            out,
            SUMMARY_FILE,
        )
        if "error" in finished:
            raise AllUpdatesSkipped(f"{out} finished already: {finished['error']}")
        return finished
    state.wait_for_everyone()
    if main:
        out.mkdir(parents=True, exist_ok=True)
        save_resolved_config(config, out / CONFIG_FILE)
        save_data_identity(out, config, data)
    logger.info("base configuration: %s", config.base_config or "none (built in code)")
    logger.info("settings: %s", settings_line(config))
    with state.main_process_first():
        parts = load_run_inputs(config, out, checked)
    started = time.perf_counter()
    before = _on_main(state, parts["evaluate"], parts["model"], "before")
    trainer = RLVRTrainer(
        model=parts["model"],
        reward_funcs=parts["rewards"],
        args=config,
        train_dataset=parts["train"],
        # Held-out evaluation during training (eval_strategy/eval_steps): TRL's own, on the
        # held-out rows, logged as TRL's eval_* metrics.
        eval_dataset=parts["heldout"] if config.eval_strategy != "no" else None,
        processing_class=parts["tokenizer"],
        callbacks=extra_callbacks,
        peft_config=peft_config_of(config),
    )  # the project's callbacks (guards, metrics.jsonl, diagnostics) come with it
    update_guard = trainer.update_guard
    # The rich bar replaces HF's tqdm bar and its printing of every log dict.
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    if progress:
        trainer.add_callback(RichProgress())
    eval_only = resume is not None and _at_end(resume, config)
    with refused_pickles_as_user_error(resume):
        if eval_only:
            # Stopped after its last checkpoint, before its summary: the Trainer would train
            # one step more; load the checkpoint and finish with the evaluation only.
            logger.warning("resume: %s is the last step; evaluating only", Path(resume).name)
            trainer._load_from_checkpoint(resume)  # TRL/transformers private API, pinned
            trainer.state = TrainerState.load_from_json(str(Path(resume) / "trainer_state.json"))
        else:
            trainer.train(resume_from_checkpoint=resume)
    # The final model (or adapter) in output_dir, as a TRL script's trainer.save_model does,
    # whatever save_strategy is; with push_to_hub, save_model uploads it with the card.
    trainer.create_model_card()
    trainer.save_model(str(out))
    if config.merge_adapter and trainer.accelerator.is_main_process:
        save_merged(trainer, out / MERGED_DIR)
    after = _on_main(state, parts["evaluate"], trainer.model, "after")
    before, before_counts = heldout_score(before)
    after, after_counts = heldout_score(after)
    summary = {
        "recipe": config.recipe,
        "bicc": config.bicc,
        "rcc": config.rcc,
        "seed": config.seed,
        "steps": trainer.state.global_step,
        "heldout_avg@n_before": before,
        "heldout_avg@n_after": after,
        "eval_n": config.eval_n,
        "heldout_before": before_counts,
        "heldout_after": after_counts,
        "nonfinite_losses": trainer.nonfinite_losses,
        "skipped_updates": trainer.skipped_updates,
        "rolled_back_updates": update_guard.rolled_back,
        "wall_seconds": time.perf_counter() - started,
        "heldout_reward": "arithmetic_reward"
        if config.model == "embedded"
        else config.rewards[heldout_reward_index(config)],
        "learning_signal": trainer.learning_signal.summary(config),
    }
    # Steps of this process's training (a resumed run counts from its checkpoint).
    first = int(resume.rsplit("-", 1)[1]) if resume else 0
    steps_here = trainer.state.global_step - first
    lost = trainer.skipped_updates + update_guard.rolled_back
    if steps_here == 0 and not eval_only:
        summary["error"] = (
            f"the run trained 0 optimizer steps ({len(parts['train'])} training rows, "
            f"max_steps={config.max_steps}, num_train_epochs={config.num_train_epochs}): "
            "give more training rows than one step's prompts, or more steps"
        )
    elif steps_here > 0 and lost >= steps_here:
        summary["error"] = (
            f"every one of the {steps_here} optimizer steps was skipped (non-finite loss or "
            f"gradient: {trainer.skipped_updates}) or rolled back (non-finite parameters: "
            f"{update_guard.rolled_back}): the run learned nothing"
        )
    elif steps_here > 0 and not _any_step_scored(out / "metrics.jsonl", first):
        summary["error"] = (
            f"no completion of the {steps_here} steps was scored: every reward function "
            "returned None for every row, so every advantage was 0 and the run learned "
            "nothing; fix the reward functions"
        )
    nothing = summary["learning_signal"]["learned_nothing"]
    if nothing and "error" not in summary and config.no_learning_signal == "error":
        summary["error"] = f"{nothing} (no_learning_signal=error); the causes found: " + (
            "; ".join(summary["learning_signal"]["causes"].values()) or "none named"
        )
    if trainer.accelerator.is_main_process:
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    if steps_here == 0 and not eval_only:
        raise NoTrainingSteps(summary["error"])
    if "error" in summary:
        raise AllUpdatesSkipped(f"{summary['error']}; see {out / 'metrics.jsonl'}")
    return summary
