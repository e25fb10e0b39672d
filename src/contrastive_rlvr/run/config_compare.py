"""Whether two resolved configs train the same: the fields that do not change what is
trained, the fields' defaults, and the differences a resume or a compare rerun refuses."""

from __future__ import annotations

import functools
from typing import Any

import yaml

#: Fields that do not change what is trained: where things are written, how often they
#: are logged or saved, progress display, the resume switches themselves, threads, and
#: the held-out evaluation before/after RL. A resume may change these freely.
NON_TRAINING_FIELDS = frozenset(
    {
        "output_dir", "logging_dir", "run_name", "report_to", "disable_tqdm",
        "resume", "resume_from_checkpoint", "overwrite_output_dir",
        "resume_allow_config_change", "save_steps", "save_strategy", "save_total_limit",
        "save_only_model", "save_safetensors", "save_on_each_node", "torch_threads",
        "eval_n", "eval_limit", "push_to_hub", "hub_model_id", "hub_strategy", "hub_token",
        "hub_private_repo", "hub_always_push", "hub_revision", "log_level", "log_level_replica",
        "log_on_each_node", "log_completions", "num_completions_to_print", "logging_steps",
        "logging_strategy", "logging_first_step", "logging_nan_inf_filter",
        "dataloader_num_workers", "dataloader_persistent_workers", "dataloader_prefetch_factor",
        "dataloader_pin_memory", "base_config",
        # What scores the held-out avg@n and whether a run without signal is an error:
        # neither changes a training step.
        "heldout_reward", "no_learning_signal",
    }
)  # fmt: skip


#: A method's switch and the prefix of its options: with the switch off, the options
#: change nothing that is trained, so runs that differ only there train the same (a plain
#: arm made beside one BiCC form is the plain arm of another).
METHOD_OPTION_PREFIXES = {"bicc": "bicc_", "rcc": "rcc_"}


#: The BiCC options the embedded reading warm start reads (its SFT cuts and places the
#: contexts as BiCC will): they stay keyed with BiCC off when that warm start is on.
READING_WARM_START_FIELDS = frozenset(
    {
        "bicc_context_ratio",
        "bicc_max_seq_len",
        "bicc_framing_budget",
        "bicc_truncation",
        "bicc_placement",
    }
)


def inactive_fields(values: dict[str, Any]) -> set[str]:
    """The options of the methods whose switch is off in ``values``, less the BiCC options
    the embedded reading warm start reads when it is on (``embedded_sft_context_frac`` >
    0)."""
    off = [prefix for switch, prefix in METHOD_OPTION_PREFIXES.items() if not values.get(switch)]
    out = {k for k in values if any(k.startswith(p) for p in off)}
    if values.get("embedded_sft_context_frac"):
        out -= READING_WARM_START_FIELDS
    return out


def without_inactive_options(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` less the options of every method whose switch is off in it."""
    drop = inactive_fields(values)
    return {k: v for k, v in values.items() if k not in drop}


def _normalised(values: dict[str, Any]) -> dict[str, Any]:
    # Through YAML, as config.yaml was written, so tuples and lists compare equal.
    return yaml.safe_load(yaml.safe_dump(values, sort_keys=True)) or {}


@functools.cache
def field_defaults() -> dict[str, Any]:
    """Every RLVRConfig field's default as ``config.yaml`` writes it (enums as their
    values); fields whose default YAML cannot hold are left out."""
    import dataclasses
    import enum

    from ..trainer.config import RLVRConfig

    out: dict[str, Any] = {}
    for f in dataclasses.fields(RLVRConfig):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue
        value = value.value if isinstance(value, enum.Enum) else value
        try:
            out[f.name] = _normalised({f.name: value})[f.name]
        except yaml.YAMLError:
            continue
    return out


def predates(saved: dict[str, Any], name: str, value: Any) -> bool:
    """Whether field ``name`` is absent from a ``saved`` config (a run made before the
    field existed) and ``value`` is the field's default (so it changes nothing)."""
    defaults = field_defaults()
    return name not in saved and name in defaults and defaults[name] == value


def config_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``field: saved -> current`` for every training field that differs (see
    :data:`NON_TRAINING_FIELDS` for the ones ignored). A field the saved config lacks (it
    was made before the field existed) is no difference while it is at its default."""
    saved, current = _normalised(saved), _normalised(current)
    # A method off in both: its options changed nothing either way.
    both = inactive_fields(saved) & inactive_fields(current)
    saved = {k: v for k, v in saved.items() if k not in both}
    current = {k: v for k, v in current.items() if k not in both}
    names = sorted((set(saved) | set(current)) - NON_TRAINING_FIELDS)
    missing = object()
    out = []
    for name in names:
        a, b = saved.get(name, missing), current.get(name, missing)
        if a != b and not predates(saved, name, b):
            fmt = lambda v: "(unset)" if v is missing else repr(v)  # noqa: E731
            out.append(f"{name}: {fmt(a)} -> {fmt(b)}")
    return out
