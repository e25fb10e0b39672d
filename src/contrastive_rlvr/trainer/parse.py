"""Build an :class:`RLVRConfig` from a YAML file and command-line overrides."""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

import yaml
from transformers import HfArgumentParser

from .config import RLVRConfig

EMBEDDED_CONFIG = "embedded.yaml"


def default_config_path() -> Path:
    """The embedded default's YAML, shipped inside the package."""
    return Path(str(resources.files("contrastive_rlvr.configs").joinpath(EMBEDDED_CONFIG)))


def load_yaml(path: str | Path, schema: type = RLVRConfig, what: str = "config file") -> dict:
    """The mapping in a YAML file of ``schema``'s fields; unknown keys raise naming them,
    the valid ones and the file."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{what} {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{what} {path} must hold a mapping of field: value")
    known = {f.name for f in dataclasses.fields(schema)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{what} {path}: unknown field(s) {unknown}; valid: {sorted(known)}")
    return data


def parse_config(config_file: str | Path | None, overrides: list[str]) -> RLVRConfig:
    """YAML values (the embedded default when no file is given), then ``--field value``
    overrides; validation happens when the dataclass is built, before any model loads."""
    from ..configs import base_config_for, model_in_args

    if any(a == "--base_config" or a.startswith("--base_config=") for a in overrides):
        raise ValueError("base_config is set by the parser; choose the base YAML with --config")
    base = Path(config_file) if config_file else base_config_for(model_in_args(overrides))
    values = load_yaml(base)
    values["base_config"] = str(base)
    parser = HfArgumentParser(RLVRConfig)
    parser.set_defaults(**values)
    (config,) = parser.parse_args_into_dataclasses(args=overrides)
    return config


def config_help() -> str:
    """argparse's help for every RLVRConfig field (TRL's and this project's)."""
    return HfArgumentParser(RLVRConfig).format_help()
