"""How a row of a prompt dataset becomes an example: the prompt and answer fields (named, or
the first of the usual names; dotted paths into nested columns), their checks, GSM8K's
``#### <answer>`` reduced to the number, and the instruction a prompt is given."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

from ..rewards.extract import normalize_answer

PROMPT_FIELDS: tuple[str, ...] = ("prompt", "messages", "problem", "question")
ANSWER_FIELDS: tuple[str, ...] = ("answer", "final_answer", "target")
AnswerFormat = Literal["auto", "gsm8k", "plain"]
ANSWER_FORMATS: tuple[str, ...] = get_args(AnswerFormat)
_GSM8K_MARKER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)
# "1,234" in GSM8K answers is a thousands separator, not a tuple.
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def gsm8k_final_answer(solution: str) -> str | None:
    """The number after the last ``####`` of a GSM8K solution, thousands commas removed."""
    marker = solution.rfind("####")
    if marker == -1:
        return None
    m = _GSM8K_MARKER.match(solution, marker)
    if m is None:
        return None
    return _THOUSANDS_COMMA.sub("", m.group(1))


def _pick_field(row: Mapping[str, Any], explicit: str | None, candidates: Sequence[str]) -> str:
    if explicit is not None:
        return explicit
    for name in candidates:
        if row.get(name) is not None:
            return name
    return candidates[0]  # reported as the missing field


def _present(row: Mapping[str, Any]) -> list[str]:
    """The fields a row has (``datasets`` gives every row every column, None where absent)."""
    return sorted(k for k, v in row.items() if v is not None)


def field_value(row: Mapping[str, Any], name: str, where: str, hint: str = "") -> Any:
    """``row[name]``, or for a dotted ``name`` the nested value it leads to
    (``reward_model.ground_truth``: ``row["reward_model"]["ground_truth"]``); a column
    whose own name has the dots wins. A field that is absent or None raises ``ValueError``
    naming the row, the missing key and the keys present where it was looked for."""
    if row.get(name) is not None:
        return row[name]
    parts = name.split(".")
    if len(parts) == 1 or name in row:
        raise ValueError(f"{where}: missing field {name!r}{hint}; row has fields {_present(row)}")
    value: Any = row
    for depth, part in enumerate(parts):
        if not isinstance(value, Mapping) or value.get(part) is None:
            above = ".".join(parts[:depth]) or "the row"
            keys = _present(value) if isinstance(value, Mapping) else []
            what = f"keys {keys}" if isinstance(value, Mapping) else type(value).__name__
            raise ValueError(
                f"{where}: missing field {name!r}: no {part!r} in {above} (which has {what}); "
                f"row has fields {_present(row)}"
            )
        value = value[part]
    return value


def _check_prompt(value: Any, field: str, where: str) -> str | list[dict[str, str]]:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{where}: field {field!r} is empty")
        return value
    if isinstance(value, list) and value:
        for i, m in enumerate(value, start=1):
            if not isinstance(m, Mapping) or "role" not in m:
                raise ValueError(
                    f"{where}: field {field!r} message {i} is not a {{'role', 'content'}}}} mapping"
                )
            if not isinstance(m.get("content"), str):
                kind = (
                    "null (a tool-call turn?)"
                    if m.get("content") is None
                    else (type(m.get("content")).__name__)
                )
                raise ValueError(
                    f"{where}: field {field!r} message {i} (role {m['role']}) has content "
                    f"{kind}, not text; give every message a text content, or leave the "
                    "row out"
                )
        messages = [{"role": str(m["role"]), "content": m["content"]} for m in value]
        if not any(m["role"] == "user" for m in messages):
            roles = ", ".join(dict.fromkeys(m["role"] for m in messages))
            raise ValueError(
                f"{where}: field {field!r} holds no user message (roles: {roles}); a prompt "
                "needs the user's turn"
            )
        return messages
    raise ValueError(
        f"{where}: field {field!r} must be a string or a list of {{'role', 'content'}} "
        f"messages, got {type(value).__name__}"
    )


def row_to_example(
    row: Any,
    where: str,
    *,
    prompt_field: str | None = None,
    answer_field: str | None = None,
    answer_format: AnswerFormat = "auto",
) -> dict[str, Any]:
    """``{"prompt", "answer"}`` from one raw row; ``where`` ("file line N") prefixes errors.
    A field may be a dotted path into nested columns (:func:`field_value`)."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
    p_field = _pick_field(row, prompt_field, PROMPT_FIELDS)
    a_field = _pick_field(row, answer_field, ANSWER_FIELDS)
    values = []
    for field, options in ((p_field, prompt_field), (a_field, answer_field)):
        hint = "" if options else f" (looked for {field!r} and its alternatives)"
        # A column that is there (null too) has its value checked, and named, below.
        values.append(row[field] if field in row else field_value(row, field, where, hint))
    prompt = _check_prompt(values[0], p_field, where)
    if p_field == "messages" and isinstance(prompt, list):
        # A whole conversation: the prompt is what comes before the assistant's reply.
        while prompt and prompt[-1]["role"] == "assistant":
            prompt = prompt[:-1]
        if not prompt:
            raise ValueError(f"{where}: field 'messages' holds only assistant turns, no prompt")
    answer = normalize_answer(values[1], field=a_field, where=where)
    if answer_format != "plain":
        final = gsm8k_final_answer(answer)
        if final is not None:
            answer = final
        elif answer_format == "gsm8k":
            raise ValueError(f"{where}: field {a_field!r} has no '#### <answer>' line")
    return {"prompt": prompt, "answer": answer}


def _count_fields(
    used: dict[str, Any],
    row: Mapping[str, Any],
    example: Mapping[str, Any],
    prompt_field: str | None,
    answer_field: str | None,
    answer_format: str,
) -> None:
    """Count which columns gave a good row its prompt and answer, and whether its answer
    was reduced to the number after GSM8K's ``####`` (:attr:`LoadedPrompts.fields`)."""
    p_field = _pick_field(row, prompt_field, PROMPT_FIELDS)
    a_field = _pick_field(row, answer_field, ANSWER_FIELDS)
    used["prompt"][p_field] = used["prompt"].get(p_field, 0) + 1
    used["answer"][a_field] = used["answer"].get(a_field, 0) + 1
    if answer_format != "plain":
        raw = row[a_field] if a_field in row else None
        used["reduced"] += isinstance(raw, str) and "####" in raw and example["answer"] != raw


def is_conversational_prompt(prompt: Any) -> bool:
    """Whether ``prompt`` is in TRL's conversational format (a list of messages)."""
    return isinstance(prompt, list)


def resolve_instruction(option: str, conversational: bool) -> str | None:
    """The text an ``instruction`` option appends (None: nothing): ``auto`` is the
    box-your-answer instruction for string prompts and nothing for conversational ones,
    which pass as the user wrote them; ``default`` that instruction; ``none`` nothing."""
    from ..generation import DEFAULT_INSTRUCTION

    if option == "auto":
        return None if conversational else DEFAULT_INSTRUCTION
    if option == "default":
        return DEFAULT_INSTRUCTION
    if option in ("none", ""):
        return None
    return option


def with_instruction(
    prompt: str | list[dict[str, Any]], instruction: str | None, *, chat: bool
) -> str | list[dict[str, Any]]:
    """The prompt TRL gets: a string prompt with ``instruction`` on a new line, as one user
    message when ``chat`` (else text ending in a newline); a conversation with
    ``instruction`` added to its last user turn, every other turn (system ones too) as it was.
    The chat template is TRL's to apply."""
    if isinstance(prompt, str):
        content = f"{prompt}\n{instruction}" if instruction else prompt
        return [{"role": "user", "content": content}] if chat else f"{content}\n"
    if not instruction:
        return prompt
    users = [i for i, m in enumerate(prompt) if m["role"] == "user"]
    if not users:
        raise ValueError(f"instruction given but the conversation has no user turn: {prompt!r}")
    last = users[-1]
    turn = {**prompt[last], "content": f"{prompt[last]['content']}\n{instruction}"}
    return [*prompt[:last], turn, *prompt[last + 1 :]]
