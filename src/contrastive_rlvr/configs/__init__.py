"""The YAML base configurations shipped with the package.

- ``embedded.yaml``: the embedded default (tiny model, arithmetic task, SFT warm
  start, GRPO + BiCC + RCC with the settings measured on that task);
- ``paper.yaml``: any pretrained model; the BiCC paper's Table 4 optimisation
  (lr 1e-6, AdamW (0.9, 0.999), weight decay 0.01, clip 1.0, cosine with 100
  warm-up of 3000 steps, G = 8), BiCC and RCC off.

:func:`base_config_for` picks one from the ``--model`` value; a ``--config``
file given by the user replaces it.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path

EMBEDDED_MODEL = "embedded"
EMBEDDED_CONFIG = "embedded.yaml"
PAPER_CONFIG = "paper.yaml"


def config_path(name: str) -> Path:
    """Path of a shipped YAML, e.g. ``config_path("paper.yaml")``."""
    path = Path(str(resources.files(__name__).joinpath(name)))
    if not path.is_file():
        raise ValueError(
            f"no shipped configuration {name!r}; use {EMBEDDED_CONFIG} or {PAPER_CONFIG}"
        )
    return path


def base_config_for(model: str | None) -> Path:
    """The shipped YAML a run of ``model`` starts from when no ``--config`` is given:
    ``embedded.yaml`` for the embedded model (and when no model is named, since that
    is the default), ``paper.yaml`` for every other model (id, path, ``.gguf``, alias)."""
    if model is None or model == EMBEDDED_MODEL:
        return config_path(EMBEDDED_CONFIG)
    return config_path(PAPER_CONFIG)


def model_in_args(args: Sequence[str]) -> str | None:
    """The value of ``--model`` (or TRL's ``--model_name_or_path``) in command-line
    overrides (``--model X`` or ``--model=X``; the last one wins, as argparse does), or
    None."""
    model = None
    flags = ("--model", "--model_name_or_path", "--model-name-or-path")
    for i, arg in enumerate(args):
        if arg in flags:
            if i + 1 >= len(args):
                raise ValueError(f"{arg} needs a value (a model id, path, .gguf or alias)")
            model = args[i + 1]
        elif arg.split("=", 1)[0] in flags and "=" in arg:
            model = arg.split("=", 1)[1]
    return model
