"""A word when a script's string prompts reach a chat model as they are.

``contrastive_rlvr.train`` (the CLI's ``train``) prepares each row: a string prompt gets
the box-your-answer instruction and becomes one user message, whose chat template TRL
applies (docs/data.md). ``RLVRTrainer`` passes the dataset to TRL as TRL takes it, so in a
script a plain string reaches a chat model as raw text, without its template: SmolLM2
then ends at once (``<|im_end|>``) and every reward is 0. Stock TRL does the same; this
module only says so, once, naming the fixes."""

from __future__ import annotations

import logging
from typing import Any

from ..errors import UserError

logger = logging.getLogger(__name__)


def first_prompt(dataset: Any) -> Any:
    """The ``prompt`` of the dataset's first row (None: no rows, or no such column)."""
    if dataset is None or "prompt" not in (getattr(dataset, "column_names", None) or []):
        return None
    try:
        return next(iter(dataset))["prompt"]
    except (StopIteration, TypeError, KeyError):
        return None


def plain_prompts_note(config: Any, dataset: Any, has_template: bool) -> str | None:
    """The warning for string prompts when the model's tokenizer (or processor) has a chat
    template, unless the config says to keep plain text (``chat_template=False``); else
    None."""
    if not isinstance(first_prompt(dataset), str):
        return None
    if not has_template or not config.chat_template:
        return None
    return (
        "the training prompts are plain strings and RLVRTrainer passes them to the model as "
        "they are (TRL's standard format): without the model's chat template and without the "
        "instruction contrastive_rlvr.train adds (RLVRConfig's chat_template and instruction "
        "are read by train, the CLI's path), so a chat model may end at once and score 0; "
        'give conversational prompts ([{"role": "user", "content": ...}]), run '
        "contrastive_rlvr.train(config), or set chat_template=False to keep plain text"
    )


def warn_plain_prompts(config: Any, dataset: Any, has_template: bool) -> None:
    """Log :func:`plain_prompts_note` once, when it applies."""
    note = plain_prompts_note(config, dataset, has_template)
    if note is not None:
        logger.warning(note)


def check_conversations_have_a_template(dataset: Any, has_template: bool, model: Any) -> None:
    """Refuse conversational prompts (message lists) for a tokenizer with no chat
    template, in one line naming the fix: TRL would fail at the first batch, deep in
    ``apply_chat_template`` (``tiny-random``'s character tokenizer has none)."""
    if not isinstance(first_prompt(dataset), list) or has_template:
        return
    name = model if isinstance(model, str) else type(model).__name__
    raise UserError(
        f"the training prompts are conversational (message lists) but the tokenizer of "
        f"model {name!r} has no chat template to render them; give string prompts, or a "
        "tokenizer with a chat template (processing_class, or set tokenizer.chat_template)"
    )
