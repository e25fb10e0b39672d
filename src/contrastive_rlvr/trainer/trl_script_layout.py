"""TRL's script layout with :class:`RLVRConfig` in it: ``TrlParser((ScriptArguments,
RLVRConfig, ModelConfig))`` (TRL's GRPO script, ``GRPOConfig`` swapped for ``RLVRConfig``).

``RLVRConfig`` carries ScriptArguments' dataset fields and ModelConfig's fields itself (so
one YAML file and one ``train`` command line hold a whole run). In TRL's layout those
fields come twice, and transformers' ``HfArgumentParser`` adds one argparse option per
field of each dataclass: argparse refused the second ``--dataset_name`` ("conflicting
option strings") before any script line ran. Here, when one of the parser's dataclasses
is an ``RLVRConfig``, a field that an earlier dataclass already added with the same type
is one option, and its value (from the command line, the YAML or the default) reaches
every dataclass that has the field: ``script_args.dataset_name``,
``training_args.dataset_name`` and ``training_args.dataset`` agree, as do
``model_args.lora_r`` and ``training_args.lora_r``.

The change is two methods of ``HfArgumentParser`` (transformers' and the copy TRL's
``TrlParser`` derives from) wrapped on import of the config module; a parser without an
``RLVRConfig`` runs the parser's own code unchanged (a clash among other dataclasses is
still argparse's error). tests/cli/test_trl_script_layout.py
runs TRL's own GRPO script text with the class names swapped.
"""

from __future__ import annotations

import dataclasses
from argparse import Namespace
from typing import Any, get_type_hints

from transformers import HfArgumentParser
from trl.scripts._hf_argparser import HfArgumentParser as TrlHfArgumentParser

#: The parser classes wrapped: transformers' and TRL's own copy of it (TrlParser's base).
PARSERS = (HfArgumentParser, TrlHfArgumentParser)
#: Each parser class's own two methods, which the wrappers call.
_ORIGINAL = {
    cls: (cls._add_dataclass_arguments, cls.parse_args_into_dataclasses) for cls in PARSERS
}


def _original(parser: Any, which: int) -> Any:
    """The wrapped method ``which`` (0 add, 1 parse) of the class ``parser`` comes from."""
    for cls in type(parser).__mro__:
        if cls in _ORIGINAL:
            return _ORIGINAL[cls][which]
    raise TypeError(f"{type(parser).__name__} is not an HfArgumentParser")


def _shares_fields(dtype: Any) -> bool:
    """Whether ``dtype`` is a config that carries TRL's script fields (RLVRConfig)."""
    return isinstance(dtype, type) and getattr(dtype, "_carries_trl_script_fields", False)


def _init_fields(dtype: Any) -> dict[str, Any]:
    return {f.name: f for f in dataclasses.fields(dtype) if f.init}


def _shared_counts(types: list[Any]) -> dict[str, int]:
    """Field name -> how many of ``types`` have it, for fields more than one has; empty
    when no type is an RLVRConfig (transformers' own behaviour then)."""
    if not any(_shares_fields(t) for t in types):
        return {}
    counts: dict[str, int] = {}
    for dtype in types:
        for name in _init_fields(dtype):
            counts[name] = counts.get(name, 0) + 1
    return {name: n for name, n in counts.items() if n > 1}


def _add_dataclass_arguments(self: HfArgumentParser, dtype: Any) -> None:
    """transformers' own, but in a parser holding an RLVRConfig a field an earlier
    dataclass added (same type) is not added again: one option for both."""
    types = list(getattr(self, "dataclass_types", []))
    if not _shared_counts(types) or dtype not in types:
        return _original(self, 0)(self, dtype)
    earlier: dict[str, Any] = {}  # field name -> its type hint in an earlier dataclass
    for other in types[: types.index(dtype)]:
        other_hints = get_type_hints(other)
        earlier.update({name: other_hints[name] for name in _init_fields(other)})
    hints = get_type_hints(dtype)
    skip = {n for n in _init_fields(dtype) if n in earlier and earlier[n] == hints[n]}
    if not skip:
        return _original(self, 0)(self, dtype)
    # transformers' loop (HfArgumentParser._add_dataclass_arguments), less the shared fields
    group = getattr(dtype, "_argument_group_name", None)
    parser = self.add_argument_group(group) if group is not None else self
    for f in dataclasses.fields(dtype):
        if f.init and f.name not in skip:
            f.type = hints[f.name]
            self._parse_dataclass_field(parser, f)


def _shared_namespace(holders: dict[str, int]) -> type[Namespace]:
    """argparse's namespace, but a shared value outlives the first dataclass that takes
    it: transformers deletes each field's value once a dataclass took it; a shared one is
    deleted when the last dataclass that has it took it (the count lives outside the
    namespace, whose leftover attributes transformers returns as one more output)."""
    remaining = dict(holders)

    class SharedNamespace(Namespace):
        def __delattr__(self, name: str) -> None:
            if remaining.get(name, 0) > 1:
                remaining[name] -= 1
                return
            super().__delattr__(name)

    return SharedNamespace


def _parse_args_into_dataclasses(self: HfArgumentParser, *args: Any, **kwargs: Any) -> Any:
    """transformers' own, with a shared field's value given to each dataclass that has it."""
    holders = _shared_counts(list(self.dataclass_types))
    if not holders:
        return _original(self, 1)(self, *args, **kwargs)
    parse_known = self.parse_known_args
    namespace_type = _shared_namespace(holders)

    def parse_known_args(args=None, namespace=None):
        parsed, rest = parse_known(args=args, namespace=namespace)
        return namespace_type(**vars(parsed)), rest

    self.parse_known_args = parse_known_args  # for this call only
    try:
        return _original(self, 1)(self, *args, **kwargs)
    finally:
        del self.parse_known_args


def install() -> None:
    """Wrap the two methods of each parser class once (idempotent)."""
    for cls in PARSERS:
        cls._add_dataclass_arguments = _add_dataclass_arguments
        cls.parse_args_into_dataclasses = _parse_args_into_dataclasses
