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


def complete_model_card(config: Any, model_id: str | None) -> None:
    """Complete TRL's card in ``output_dir``: name the base model where TRL wrote ``None``
    (the config's model, else ``model_id``, the model's own config id), tag the project,
    recipe and methods, and add :func:`run_section`."""
    path = Path(config.output_dir) / "README.md"
    base_model = str(config.model_name_or_path or model_id)
    text = path.read_text()
    tags = ["contrastive-rlvr", config.recipe, *methods_on(config)]
    if text.startswith("---\n") and "\ntags:\n" in text:  # TRL's YAML header lists tags
        text = text.replace("\ntags:\n", "\ntags:\n" + "".join(f"- {t}\n" for t in tags), 1)
    link = (
        f"[{base_model}](https://huggingface.co/{base_model})"
        if _HUB_ID.match(base_model) and not Path(base_model).exists()
        else f"`{base_model}`"
    )
    text = text.replace("[None](https://huggingface.co/None)", link)
    text = text.replace("base_model: None\n", "")  # no Hub link for a local model
    path.write_text(text.rstrip("\n") + "\n\n" + run_section(config, base_model))


class ProjectModelCard:
    """Trainer mixin: TRL's ``create_model_card``, then :func:`complete_model_card` on the
    main process (``push_to_hub`` writes its card through here too)."""

    def create_model_card(self, model_name=None, dataset_name=None, tags=None) -> None:
        from trl.trainer.utils import get_config_model_id

        super().create_model_card(model_name, dataset_name or self.args.dataset, tags)
        if self.is_world_process_zero():
            complete_model_card(self.args, get_config_model_id(self.model.config))
