"""The run inputs of a user's model and data (any ``model`` but ``embedded``): the model
loaded and checked (finite weights), the prompts with their instruction and chat template
checked against the model (roles, lengths), the held-out split, the guarded rewards and
the held-out evaluator."""

from __future__ import annotations

import json
import logging
from typing import Any

import torch

from ..errors import UserError
from ..shared_forward.sharing import prompt_length
from ..trainer.config import RLVRConfig
from ..trainer.model_options import init_kwargs_as_user_error, model_load_kwargs
from .heldout import heldout_evaluator, heldout_reward_index
from .preflight import PreflightResult, preflight

logger = logging.getLogger(__name__)
#: What a run says once at its start (field mapping, held-out reward): shown at the
#: default log level (INFO here) unless the run's log_level asks for fewer lines.
start_log = logging.getLogger("contrastive_rlvr.start")
#: Text prompts tokenized at once by the length check (every row is checked).
LENGTH_BATCH = 4096


def custom_inputs(config: RLVRConfig, checked: PreflightResult | None = None) -> dict[str, Any]:
    """A Hugging Face (or GGUF-alias) model on a prompt dataset with the configured rewards;
    held-out avg@n on ``heldout_size`` seeded problems of the dataset kept out of training
    (split by prompt, :func:`~contrastive_rlvr.data.split_heldout`: a problem the dataset
    repeats is on one side only).

    The prompts go to TRL as TRL takes them (a string, or a list of messages whose chat
    template TRL applies once); every column of the dataset stays, so the reward functions
    and stages get each one, in training (TRL passes them as keyword arguments) and in the
    held-out evaluation (passed the same way here)."""
    from ..data import is_conversational_prompt, resolve_instruction, with_instruction
    from ..models import load_model_and_tokenizer

    checked = checked if checked is not None else preflight(config)
    with init_kwargs_as_user_error(config):
        model, tokenizer = load_model_and_tokenizer(config.model, **model_load_kwargs(config))
    check_finite_weights(model, config.model)
    model.train()
    # Shuffled, split and checked for training rows once, by the preflight.
    loaded, data, split = checked.prompts, checked.shuffled, checked.split
    if loaded.skipped:
        logger.warning("%s: skipped %d malformed rows", loaded.source, loaded.skipped)
    if checked.heldout_note:
        start_log.info("%s: %s", loaded.source, checked.heldout_note)
    if split.repeats:
        logger.warning(
            "%s: %d of %d rows repeat an earlier row's prompt (%d distinct prompts): held out "
            "%d prompts, each evaluated once; their %d other rows are left out of training",
            loaded.source,
            split.repeats,
            len(data),
            split.problems,
            len(split.heldout),
            split.dropped,
        )
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
    check_prompt_lengths(config, model, tokenizer, data["prompt"])  # every row
    rewards = checked.rewards  # guarded by the preflight
    log_field_mapping(loaded)
    which = heldout_reward_index(config)
    evaluate = None
    if len(heldout):
        start_log.info(
            "held-out avg@%d on %d problems is scored by reward %r (heldout_reward)",
            config.eval_n,
            len(heldout),
            config.rewards[which],
        )
        evaluate = heldout_evaluator(config, tokenizer, heldout, rewards[which], chat=chat)
    else:
        start_log.info("no held-out scoring (heldout_size=0)")
    return dict(
        model=model,
        tokenizer=tokenizer,
        train=train,
        heldout=heldout,
        rewards=rewards,
        evaluate=evaluate,
    )


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


def check_prompt_lengths(config: RLVRConfig, model: Any, tokenizer: Any, prompts: list) -> None:
    """Refuse prompts that with ``max_completion_length`` need more positions than the
    model has (TRL does not cut prompts: the model would run past what it was trained on,
    without a word)."""
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if not isinstance(positions, int) or not prompts:
        return
    longest = max(_prompt_lengths(tokenizer, prompts))
    if longest + config.max_completion_length > positions:
        raise UserError(
            f"dataset={config.dataset!r}: its longest prompt is {longest} tokens, which with "
            f"max_completion_length={config.max_completion_length} needs more than the "
            f"model's {positions} positions (max_position_embeddings); shorten the prompts "
            "or lower max_completion_length"
        )


def _prompt_lengths(tokenizer: Any, prompts: list) -> list[int]:
    """The token count of every prompt as :func:`prompt_length` counts it: text prompts
    tokenized in batches of :data:`LENGTH_BATCH` (a fast tokenizer takes a batch at once,
    so every row of a large dataset is checked in seconds), chat prompts one at a time
    through the template."""
    texts = [p for p in prompts if not isinstance(p, list)]
    lengths = [prompt_length(tokenizer, p) for p in prompts if isinstance(p, list)]
    for start in range(0, len(texts), LENGTH_BATCH):
        lengths += [len(ids) for ids in tokenizer(texts[start : start + LENGTH_BATCH])["input_ids"]]
    return lengths


def check_chat_roles(config: RLVRConfig, tokenizer: Any, dataset: Any, instruction: Any) -> None:
    """Render, with the chat template, the first row of every distinct sequence of roles
    in ``dataset`` (all its rows, in the file's order), as TRL will render each row: a
    template that refuses a role (or its place) stops the run here, naming the row, not
    mid-training when that row's batch comes."""
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
