"""The model card of a trained model: TRL's, with the base model named (TRL leaves it
``None`` for a local folder) and a section on the run (recipe, methods on, base config)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: The config flags of the project's methods, as the card names them.
METHODS = {
    "bicc": "BiCC",
    "rcc": "RCC",
    "verigate": "VeriGate",
    "reco": "ReCo",
    "oc_grpo": "OC-GRPO",
    "dynamic_sampling": "dynamic sampling",
    "use_peft": "LoRA (PEFT)",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def methods_on(config: Any) -> list[str]:
    """The names of the project's methods ``config`` switches on."""
    return [name for flag, name in METHODS.items() if getattr(config, flag, False)]


def run_section(config: Any, base_model: str) -> str:
    """The card's section on the run, in Markdown."""
    methods = ", ".join(methods_on(config)) or "none (plain recipe)"
    lines = [
        "## contrastive-rlvr run",
        "",
        f"- base model: `{base_model}`",
        f"- recipe: `{config.recipe}`",
        f"- methods on: {methods}",
        f"- dataset: `{config.dataset or 'embedded arithmetic task'}`",
        f"- base configuration: `{config.base_config or 'none (built in code)'}`",
        "",
    ]
    return "\n".join(lines)


def complete_model_card(path: Path, config: Any, base_model: str) -> None:
    """Name ``base_model`` where TRL's card wrote ``None``, and add :func:`run_section`."""
    text = path.read_text()
    link = (
        f"[{base_model}](https://huggingface.co/{base_model})"
        if _HUB_ID.match(base_model) and not Path(base_model).exists()
        else f"`{base_model}`"
    )
    text = text.replace("[None](https://huggingface.co/None)", link)
    text = text.replace("base_model: None\n", "")  # no Hub link for a local model
    path.write_text(text.rstrip("\n") + "\n\n" + run_section(config, base_model))
