"""The checks every option group uses: one ``UserError`` line per invalid value, and the
choices of a field read from its ``Literal`` annotation (so adding a choice to the
``Literal`` is the whole change)."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing

from ..errors import UserError


def check(ok: bool, name: str, value: object, fix: str) -> None:
    """Raise ``UserError("name=value is invalid: fix")`` unless ``ok``.

    ``UserError`` is a ``ValueError`` the CLI prints as one ``error:`` line (exit 2):
    a config value is the user's input."""
    if not ok:
        raise UserError(f"{name}={value!r} is invalid: {fix}")


def finite(value: object) -> bool:
    """A real number that is neither NaN nor +-inf (bools and strings are not numbers here)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _literal_values(hint: object) -> tuple[tuple[object, ...], bool]:
    """The values a ``Literal`` annotation allows, and whether it also allows ``None``
    (``Literal[...] | None``); ``((), False)`` for any other annotation."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return typing.get_args(hint), False
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        values: tuple[object, ...] = ()
        for arg in args:
            values += _literal_values(arg)[0]
        return values, type(None) in args
    return (), False


@functools.cache
def literal_fields(group: type) -> dict[str, tuple[tuple[object, ...], bool]]:
    """Field name -> (its choices, whether ``None`` is allowed) for every field of the
    dataclass ``group`` annotated with a ``Literal`` (read with ``typing.get_args``)."""
    hints = typing.get_type_hints(group)
    out = {}
    for f in dataclasses.fields(group):
        values, optional = _literal_values(hints[f.name])
        if values:
            out[f.name] = (values, optional)
    return out


def choices(group: type, name: str) -> tuple[object, ...]:
    """The values the ``Literal`` of ``group``'s field ``name`` allows."""
    return literal_fields(group)[name][0]


def check_choices(config: object, group: type, where: str = "") -> None:
    """Every ``Literal`` field of ``group`` holds one of its choices on ``config`` (or
    ``None`` where the annotation allows it); ``where`` prefixes the field's name in the
    error (verl's ``actor_rollout_ref.actor.policy_loss.``)."""
    for name, (values, optional) in literal_fields(group).items():
        value = getattr(config, name)
        unset = ", or leave it unset for the default" if optional else ""
        check(
            value in values or (optional and value is None),
            where + name,
            value,
            f"choose one of {', '.join(map(str, values))}{unset}",
        )


def _kinds(hint: object) -> tuple[set[type], bool]:
    """The plain kinds (``bool``, ``int``, ``float``) an annotation allows, and whether it
    allows ``None``; an empty set for any other annotation (left to its own check)."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    args = typing.get_args(hint) if union else (hint,)
    return {a for a in args if a in (bool, int, float)}, type(None) in args


def check_field_types(config: object, groups: tuple[type, ...], where: str = "") -> None:
    """Every ``bool``, ``int`` or ``float`` field of ``groups`` holds a value of that kind on
    ``config``: a config read without a schema (verl's YAML through OmegaConf, a Hydra
    override) can hand over the string ``"false"``, which is true in Python, or ``"0.5"``
    where a number belongs. Refused in one line naming the field and the fix. ``config``
    may be the raw mapping (a ``DictConfig`` section) before any dataclass is built."""
    mapping = hasattr(config, "keys") and hasattr(config, "get")
    for group in groups:
        hints = typing.get_type_hints(group)
        for f in dataclasses.fields(group):
            kinds, optional = _kinds(hints[f.name])
            if not kinds:
                continue
            if mapping and f.name not in config:
                continue  # not given: the default, which is of its kind
            value = config.get(f.name) if mapping else getattr(config, f.name, None)
            if value is None and optional:
                continue
            if bool in kinds:
                ok = isinstance(value, bool)
                fix = "write true or false without quotes (a quoted 'false' is true)"
            else:
                ok = isinstance(value, int | float) and not isinstance(value, bool)
                ok = ok and (float in kinds or isinstance(value, int))
                fix = "write the number without quotes"
            if not ok:
                raise UserError(
                    f"{where}{f.name}={value!r} is a {type(value).__name__}, not a "
                    f"{' or '.join(sorted(k.__name__ for k in kinds))}: {fix}"
                )
