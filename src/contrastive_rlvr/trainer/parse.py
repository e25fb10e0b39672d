"""Build an :class:`RLVRConfig` from a YAML file and command-line overrides.

Every field can be given on the command line as ``--field_name value`` or
``--field-name value`` (both spellings, as ``eval`` and ``compare`` take theirs).

TRL's ``TrlParser`` merges the two (the YAML's values as defaults, the overrides over
them). Reading the YAML is this module's, not TrlParser's: it picks the base file by
``--model``, reads a pipe once and with a deadline, and refuses a key given twice and an
alias bomb, none of which TrlParser's own reading does (docs/architecture.md, "Why the CLI
parses its own YAML"; tests/cli/test_trl_parser_yaml.py runs TrlParser on each case).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import re
import types
import typing
from importlib import resources
from pathlib import Path

import yaml
from transformers import HfArgumentParser
from trl import TrlParser

from ..configs import base_config_for, model_in_args
from ..redaction import redact
from .config import RLVRConfig
from .config_groups import GROUPS

EMBEDDED_CONFIG = "embedded.yaml"
CONFIG_HELP = (
    "YAML file of the fields below (default: the shipped embedded.yaml for the embedded "
    "model, paper.yaml for any other --model)."
)
FLAG_HELP = "Print this help, and exit."
TRL_GROUP = "TRL (GRPOConfig and transformers' TrainingArguments)"
USAGE = "contrastive-rlvr train [--config FILE] [--FIELD VALUE ...]"
DESCRIPTION = (
    "Train a model with RLVR. With no arguments: the embedded default (tiny model, arithmetic "
    "task, SFT warm start, then GRPO + BiCC + RCC), offline. Values come from the YAML file "
    "(--config; default: the embedded default, or for any other --model the shipped "
    "paper.yaml: the BiCC paper's optimisation, BiCC and RCC off), then from --field value "
    "overrides; every "
    "field can be spelled with underscores or hyphens (--max_completion_length or "
    "--max-completion-length)."
)


def default_config_path() -> Path:
    """The embedded default's YAML, shipped inside the package."""
    return Path(str(resources.files("contrastive_rlvr.configs").joinpath(EMBEDDED_CONFIG)))


#: Most values (scalars, lists and mappings, each alias counted as what it expands to) a
#: YAML file of this project may hold: a few hundred in any real config; an alias bomb
#: (a few hundred bytes) expands to billions.
MAX_YAML_VALUES = 100_000
#: Most characters of scalar text a YAML file of this project may hold with each alias
#: written out (16 MiB): a 100 kB string aliased 99,000 times is 9.9 GB.
MAX_YAML_CHARS = 16 << 20


class YAMLTooLarge(ValueError):
    """A YAML document whose aliases expand past :data:`MAX_YAML_VALUES` values or
    :data:`MAX_YAML_CHARS` characters, or refer to themselves."""


def read_config_text(path: str | Path, what: str = "config file") -> str:
    """The text of a config file, read once: a regular file at once; a pipe or FIFO
    (``--config <(...)``) until its writer closes it, with the deadline of
    :func:`~contrastive_rlvr.pipe_input.read_config_text` (no writer: a one-line error)."""
    import stat as stat_module

    from ..pipe_input import read_config_text as read_pipe

    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ValueError(f"{what} {path} does not exist") from None
    if stat_module.S_ISDIR(mode):
        raise ValueError(f"{what} {path} is a directory: give a YAML file")
    if not stat_module.S_ISREG(mode):
        return read_pipe(path, what)
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{what} {path} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
            f"{err.start}); save it as UTF-8"
        ) from err


def unknown_field(name: object, known: set[str]) -> str:
    """``unknown field NAME (did you mean CLOSEST?)`` and where the fields are listed; a
    verl-only field (the stale-rollout choices) says so."""
    import dataclasses
    import difflib

    from ..method_options.staleness import StalenessFields

    if str(name) in {f.name for f in dataclasses.fields(StalenessFields)}:
        return (
            f"{name!r} is a verl option (its asynchronous modes train on stale rollouts); "
            "TRL generates with the weights it updates, so train has no stale rows: drop it"
        )
    close = difflib.get_close_matches(str(name), sorted(known), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    listed = f"valid: {', '.join(sorted(known))}"
    if len(known) > 20:
        listed = "`contrastive-rlvr train --fields` lists them"
    return f"unknown field {name!r}{hint}; {listed}"


def safe_yaml(text: str) -> object:
    """``text`` parsed with the safe loader that refuses duplicate keys
    (:class:`_UniqueKeyLoader`) and alias bombs (:class:`YAMLTooLarge`): the values are
    counted with each alias expanded before any Python object is built."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def load_yaml(
    path: str | Path,
    schema: type = RLVRConfig,
    what: str = "config file",
    checked_by_caller: frozenset[str] = frozenset(),
    text: str | None = None,
) -> dict:
    """The mapping in a YAML file of ``schema``'s fields; unknown keys raise naming them,
    the valid ones and the file, and so do values of the wrong type (except the fields in
    ``checked_by_caller``, which the caller converts and checks itself). The file is read
    once (:func:`read_config_text`), or not at all when ``text`` (its text, read by the
    caller) is given."""
    path = Path(path)
    if text is None:
        text = read_config_text(path, what)
    try:
        data = safe_yaml(text)
    except YAMLTooLarge as err:
        raise ValueError(f"{what} {path}: {err}") from err
    except yaml.YAMLError as err:
        raise ValueError(f"{what} {path} is not valid YAML: {' '.join(str(err).split())}") from err
    if data is None:  # empty, or comments only: never the built-in defaults instead
        raise ValueError(
            f"{what} {path} is empty (no field: value in it); give the fields to set, or "
            "leave out the file for the default"
        )
    if not isinstance(data, dict):
        raise ValueError(f"{what} {path} must hold a mapping of field: value")
    known = {f.name for f in dataclasses.fields(schema)}
    unknown = sorted(set(data) - known, key=str)
    if unknown:
        raise ValueError(f"{what} {path}: {unknown_field(unknown[0], known)}")
    hints = typing.get_type_hints(schema)
    for name, value in data.items():
        if name not in checked_by_caller and not _fits(value, hints.get(name, typing.Any)):
            raise ValueError(
                f"{what} {path}: {name}={value!r} is a {type(value).__name__}, not a "
                f"{_type_name(hints[name])}"
            )
    return data


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key given twice in one mapping (PyYAML keeps the last
    silently, so the first value would be ignored without a word), and a document whose
    aliases expand past :data:`MAX_YAML_VALUES` values (PyYAML shares an aliased object,
    but every later walk of it, the type checks, a dump or a hash, expands it)."""

    def get_single_data(self):
        node = self.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node)
        return self.construct_document(node)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"{key!r} is given twice (lines {seen[key]} and "
                    f"{key_node.start_mark.line + 1}): keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _check_expanded_size(root: yaml.Node) -> None:
    """Count the values of a composed YAML document as if every alias were written out
    (each node's count computed once, so a bomb costs its size in nodes, not its
    expansion); raise :class:`YAMLTooLarge` past :data:`MAX_YAML_VALUES` or on an
    alias inside its own anchor."""
    sizes: dict[int, int] = {}
    chars: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise YAMLTooLarge(
                f"an alias refers to its own anchor (line {node.start_mark.line + 1}): "
                "write the value out"
            )
        open_nodes.add(key)
        if isinstance(node, yaml.MappingNode):
            kids = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        else:
            kids = []
        total = 1 + sum(size(n) for n in kids)
        text = len(node.value) if isinstance(node, yaml.ScalarNode) else 0
        chars[key] = text + sum(chars[id(n)] for n in kids)
        open_nodes.discard(key)
        if chars[key] > MAX_YAML_CHARS:
            raise YAMLTooLarge(
                f"its aliases (*name) expand to more than {MAX_YAML_CHARS} characters of text "
                f"(line {node.start_mark.line + 1}): write the value out once instead of "
                "aliasing it many times"
            )
        if total > MAX_YAML_VALUES:
            raise YAMLTooLarge(
                f"its aliases (*name) expand to more than {MAX_YAML_VALUES} values (line "
                f"{node.start_mark.line + 1}): a config holds a few hundred; write the "
                "values out instead of nesting aliases"
            )
        sizes[key] = total
        return total

    size(root)


def _fits(value: object, hint: object) -> bool:
    """Whether a YAML value can be the field's value; a string is left to argparse's own
    conversion of defaults (YAML reads ``1e-4`` as a string); unknown types pass."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if isinstance(value, str) and hint in (int, float, bool):
        return True
    if hint is bool:
        return isinstance(value, bool)
    if hint in (int, float):
        ok = (int,) if hint is int else (int, float)
        return isinstance(value, ok) and not isinstance(value, bool)
    if hint is str or (isinstance(hint, type) and issubclass(hint, enum.Enum)):
        return isinstance(value, str)
    if origin in (list, tuple):
        return isinstance(value, list | tuple) and all(
            _fits(v, (args or (object,))[0]) for v in value
        )
    if origin is dict:
        return isinstance(value, dict)
    return True


def _type_name(hint: object) -> str:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if hint is type(None):
        return "null"
    return getattr(hint, "__name__", str(hint)) if not args else str(hint)


def parse_config(
    config_file: str | Path | None, overrides: list[str], text: str | None = None
) -> RLVRConfig:
    """YAML values, then ``--field value`` overrides; validation happens when the dataclass
    is built, before any model loads.

    The YAML is ``config_file`` when given, else the shipped base configuration for the
    ``--model`` of the overrides (:func:`~contrastive_rlvr.configs.base_config_for`:
    ``embedded.yaml`` for the embedded model or no ``--model``, ``paper.yaml`` for any
    other). The config's ``base_config`` records which file it was. ``text``: the text of
    ``config_file``, read once by a caller that builds many configs from it."""
    if any(a.split("=", 1)[0] in ("--base_config", "--base-config") for a in overrides):
        raise ValueError("base_config is set by the parser; choose the base YAML with --config")
    base = Path(config_file) if config_file else base_config_for(model_in_args(overrides))
    values = load_yaml(base, text=text if config_file else None)
    if config_file:
        _check_names_a_model(base, values, overrides)
    # TRL's parser merges the YAML's values under the command line's, as its own
    # parse_args_and_config does; the YAML is read and loaded above, not by TrlParser,
    # which would lose the guarantees listed in docs/architecture.md ("Why the CLI parses
    # its own YAML"). No prefixes: --max_step must not silently mean --max_steps.
    _check_json_fields(base, values, overrides)
    parser = _OneLineParser(RLVRConfig, allow_abbrev=False)
    unused = parser.set_defaults_with_config(**values)
    if unused:  # load_yaml took only RLVRConfig's fields, each an option
        raise ValueError(f"{base}: fields with no option: {unused[::2]}")
    try:
        config, rest = parser.parse_args_into_dataclasses(
            args=overrides, return_remaining_strings=True
        )
    except _ArgumentError as err:
        raise ValueError(_wrong_value(str(err), base, values, overrides)) from None
    if rest:
        raise ValueError(_not_used(rest))
    config.base_config = str(base)
    return config


def _check_json_fields(base: Path, values: dict, overrides: list[str]) -> None:
    """A dict field given as a JSON string (``--model_init_kwargs '{...}'``) that does not
    parse is one line naming the field (transformers' own parse names none)."""
    import json

    hints = typing.get_type_hints(RLVRConfig)
    dict_fields = {n for n, h in hints.items() if "dict" in str(h).lower()}
    given = [(f"config file {base}: {k}", v) for k, v in values.items() if k in dict_fields]
    for i, arg in enumerate(overrides):
        name, eq, value = arg.partition("=")
        name = name[2:].replace("-", "_") if name.startswith("--") else ""
        if name in dict_fields:
            raw = value if eq else (overrides[i + 1] if i + 1 < len(overrides) else "")
            given.append((f"--{name}", raw))
    for where, raw in given:
        if isinstance(raw, str) and raw.strip().startswith(("{", "[")):
            try:
                json.loads(raw)
            except ValueError as err:
                raise ValueError(
                    f"{where} is not valid JSON ({err}); write it as a JSON object, e.g. "
                    "'{\"dtype\": \"bfloat16\"}'"
                ) from None


class _ArgumentError(ValueError):
    """argparse's complaint about one option (a value of the wrong type)."""


class _OneLineParser(TrlParser):
    """TrlParser whose errors are exceptions, not 280 lines of usage and an exit: a value
    of the wrong type becomes one line naming the field and where it was given."""

    def error(self, message: str) -> typing.NoReturn:  # argparse's hook
        raise _ArgumentError(message)


def _wrong_value(message: str, base: Path, values: dict, overrides: list[str]) -> str:
    """One line for argparse's ``argument --lr/--learning-rate: invalid float value: 'x'``:
    the field, its value, the type expected, and the file when the value came from it."""
    m = re.match(r"argument --([\w-]+)(?:/[^:]*)?: (.*)", message)
    if m is None:
        return message
    name, detail = m.group(1).replace("-", "_"), m.group(2)
    given = any(a.split("=", 1)[0].lstrip("-").replace("-", "_") == name for a in overrides)
    hint = typing.get_type_hints(RLVRConfig).get(name)
    expected = f" (expected {_type_name(hint)})" if hint is not None else ""
    if name in values and not given:
        return f"config file {base}: {name}={values[name]!r} is invalid{expected}: {detail}"
    return f"--{name}: {detail}{expected}"


def _not_used(rest: list[str]) -> str:
    """The error for command-line words no option took; one that names a field without the
    ``--`` of an option (``seed 3``, ``-seed=3``) says how to write it."""
    fields = {f.name for f in dataclasses.fields(RLVRConfig)}
    bare = [w for w in rest if not w.startswith("--")]
    named = [w for w in bare if w.lstrip("-").split("=", 1)[0].replace("-", "_") in fields]
    options = [w.split("=", 1)[0][2:].replace("-", "_") for w in rest if w.startswith("--")]
    if named:
        hint = f"an option starts with --: write --{named[0].lstrip('-')}, not {named[0]}"
    elif options:
        hint = unknown_field(options[0], fields)
    else:
        hint = (
            "each option is written in full, with its --: `contrastive-rlvr train --fields` "
            "lists them"
        )
    return f"arguments not used: {rest} ({hint})"


def _check_names_a_model(path: Path, values: dict, overrides: list[str]) -> None:
    """A YAML of TRL's fields that names no model would silently train the embedded toy
    model (the default of ``model``): refuse it, naming the fix."""
    if "model" in values or "model_name_or_path" in values or model_in_args(overrides):
        return
    ours = {f.name for group in GROUPS for f in dataclasses.fields(group)}
    trl_keys = sorted(set(values) - ours)
    if trl_keys:
        raise ValueError(
            f"config file {path} sets TRL fields ({', '.join(trl_keys[:4])}) but names no model; "
            "add model_name_or_path: <id or path> (or --model), or model: embedded for the "
            "embedded default"
        )


def _argparse_metadata(metadata: typing.Mapping) -> dict:
    """A field's metadata with ``%`` in its help escaped: argparse formats help texts with
    ``%`` (``%(default)s``), so a literal "+5%" would break ``train --help``."""
    out = dict(metadata)
    if isinstance(out.get("help"), str):
        out["help"] = out["help"].replace("%", "%%")
    return out


def _help_section(
    title: str, fields: list[dataclasses.Field], hints: dict, values: dict | None = None
) -> type:
    """A dataclass of some of RLVRConfig's fields, which ``HfArgumentParser`` lists under
    ``title`` (its ``_argument_group_name``); ``values``: the run's values, shown as
    "[this run: ...]" after the help of each that differs from the code's default."""

    def metadata(f: dataclasses.Field) -> dict:
        meta = _argparse_metadata(f.metadata)
        if values is None or f.name not in values:
            return meta
        code = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        value = values[f.name]
        if value != code:  # argparse prints the code's default; say what this run uses
            shown = getattr(value, "value", value)
            note = f" [this run: {shown}]".replace("%", "%%")
            meta["help"] = f"{meta.get('help', '')}{note}"
        return meta

    spec = [
        (
            f.name,
            hints[f.name],
            dataclasses.field(
                default=f.default,
                default_factory=f.default_factory,
                init=f.init,
                metadata=metadata(f),
            ),
        )
        for f in fields
    ]
    section = dataclasses.make_dataclass(title.split()[0] + "Help", spec, kw_only=True)
    section._argument_group_name = title
    return section


def config_help(resolved: RLVRConfig | None = None) -> str:
    """``train --help``: the command's own options, then every RLVRConfig field with its
    help text, this project's groups first (in :data:`GROUPS` order), TRL's after. With
    ``resolved`` (the config the same command line would run), each field whose value
    there differs from the code's default says "[this run: VALUE]"."""
    values = None
    if resolved is not None:
        values = {f.name: getattr(resolved, f.name) for f in dataclasses.fields(RLVRConfig)}
        values = redact(values)  # the secrets rule: no token on the terminal
    hints = typing.get_type_hints(RLVRConfig)
    every = {f.name: f for f in dataclasses.fields(RLVRConfig)}
    sections, ours = [], set()
    for group in GROUPS:
        names = [f.name for f in dataclasses.fields(group)]
        ours.update(names)
        sections.append(_help_section(group.help_group, [every[n] for n in names], hints, values))
    rest = [f for name, f in every.items() if name not in ours]
    sections.append(_help_section(TRL_GROUP, rest, hints, values))
    parser = HfArgumentParser(sections, usage=USAGE, description=DESCRIPTION, add_help=False)
    command = parser.add_argument_group("Command")
    quiet = argparse.SUPPRESS  # no "(default: ...)" after the command's own options
    command.add_argument("--config", metavar="FILE", default=quiet, help=CONFIG_HELP)
    for flag in (["--fields"], ["--help", "-h"]):
        command.add_argument(*flag, action="store_true", default=quiet, help=FLAG_HELP)
    # The command's options first, then the project's groups, then TRL's.
    parser._action_groups.insert(0, parser._action_groups.pop())
    return parser.format_help()


#: The end of a help text's first sentence (not "e.g." or a decimal point).
_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!\.)\.(?=\s|$)")
#: Longest help shown by ``--fields`` (its first sentence, cut here).
FIELD_HELP_CHARS = 90


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    m = _SENTENCE_END.search(text)
    first = text[: m.start()] if m else text
    return first if len(first) <= FIELD_HELP_CHARS else first[: FIELD_HELP_CHARS - 3] + "..."


def config_fields(resolved: RLVRConfig | None = None) -> str:
    """``train --fields``: one line per RLVRConfig field (name, type, the value this command
    line would run with, the first sentence of its help), grouped as ``--help`` groups them;
    without ``resolved`` the code's defaults."""
    hints = typing.get_type_hints(RLVRConfig)
    every = {f.name: f for f in dataclasses.fields(RLVRConfig) if f.init}
    every.pop("base_config", None)  # set by the parser, named in the first line
    groups, ours = [], set()
    for group in GROUPS:
        names = [f.name for f in dataclasses.fields(group) if f.name in every]
        ours.update(names)
        groups.append((group.help_group, names))
    groups.append((TRL_GROUP, [n for n in every if n not in ours]))

    def value_of(f: dataclasses.Field) -> object:
        if resolved is not None:
            return getattr(resolved, f.name)
        return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default

    source = f" (values of this run: {resolved.base_config} + overrides)" if resolved else ""
    lines = [f"RLVRConfig fields{source}: name  type  value  help"]
    for title, names in groups:
        lines.append(f"\n[{title}]")
        for name in names:
            f = every[name]
            value = redact({name: value_of(f)})[name]  # the secrets rule
            shown = json_value(getattr(value, "value", value))
            help_text = _first_sentence(f.metadata.get("help", ""))
            lines.append(f"{name}  {_short_type(hints[name])}  {shown}  {help_text}".rstrip())
    return "\n".join(lines)


def _short_type(hint: object) -> str:
    """A type as ``--fields`` shows it: ``float or null``, a Literal as its choices."""
    if typing.get_origin(hint) is typing.Literal:
        return "|".join(str(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_short_type(a) for a in typing.get_args(hint))
    return _type_name(hint)


def json_value(value: object) -> str:
    """A field's value as one would write it on the command line or in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        # quoted where the text has spaces or escapes, so each line splits on its columns
        return value if value.isprintable() and value and " " not in value else repr(value)
    return str(value)
