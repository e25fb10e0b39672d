"""What a trained model says about itself: the model card (TRL's, with the model and its
base named, no Hub link to a local path, and a section on the run) and the base model a
PEFT adapter records (an alias's upstream Hugging Face id, never a cache path); and the
model names the trainer loads itself (the CLI's aliases, GGUF files, adapter folders)."""

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


def loads_itself(name: str) -> bool:
    """Whether a model given by name needs the project's loader (an alias, a GGUF file, an
    alias's upstream id standing offline, an adapter folder) rather than TRL's
    ``from_pretrained``, which would look each up on the Hub."""
    from ..models import ALIASES, TINY_ALIAS, alias_standing_in, is_adapter_folder

    return (
        name in ALIASES
        or name == TINY_ALIAS
        or name.endswith(".gguf")
        or is_adapter_folder(name)
        or alias_standing_in(name) is not None
    )


#: Place of ``processing_class`` among GRPOTrainer's positional arguments after ``args``.
_PROCESSING_CLASS_AT = 2


def load_named_model(model: Any, args: Any, rest: tuple, kwargs: dict) -> Any:
    """``model`` loaded by the project's loader when it is a name only that loader knows
    (:func:`loads_itself`), with ``args``' dtype and ``model_init_kwargs``; its tokenizer
    goes into ``kwargs`` as ``processing_class`` unless one was given. Anything else is
    returned as it is (TRL loads a Hub id or a model folder itself)."""
    if not isinstance(model, str) or not loads_itself(model):
        return model
    from ..models import load_model_and_tokenizer
    from .model_options import model_load_kwargs

    loaded, tokenizer = load_model_and_tokenizer(model, **model_load_kwargs(args))
    loaded.train()
    if "processing_class" not in kwargs and len(rest) <= _PROCESSING_CLASS_AT:
        kwargs["processing_class"] = tokenizer
    return loaded


def record_base_model(model: Any) -> None:
    """A PEFT model's adapter configs record the base model by a name another machine can
    load: an alias's upstream id in place of the local folder it was converted into."""
    from ..models import recorded_model_id

    for peft_config in getattr(model, "peft_config", {}).values():
        base = peft_config.base_model_name_or_path
        if base:
            peft_config.base_model_name_or_path = recorded_model_id(base)
    # PEFT's own card edit on save reads the base config's name (its YAML base_model) and
    # the base model's name_or_path (its base_model:adapter tag). Called once the trainer
    # is built: TRL's vLLM engine was started from the local folder's name before.
    base = model.get_base_model()
    config = getattr(base, "config", None)
    if config is not None and getattr(config, "_name_or_path", None):
        config._name_or_path = recorded_model_id(config._name_or_path)
    if getattr(base, "name_or_path", None):
        base.name_or_path = recorded_model_id(base.name_or_path)


def methods_on(config: Any, adapter: bool = False) -> list[str]:
    """The names of the project's methods ``config`` switches on; ``adapter``: the model
    trained is a PEFT adapter (a script's ``peft_config`` without ``use_peft`` too)."""
    names = [name for flag, name in METHODS.items() if getattr(config, flag, False)]
    if adapter and METHODS["use_peft"] not in names:
        names.append(METHODS["use_peft"])
    return names


def data_named(config: Any, train_dataset: Any = None) -> str:
    """What the card calls the run's data: the embedded task, the ``dataset`` the config
    names, else the dataset passed in code (its rows and columns), else "not recorded"."""
    if config.model == "embedded":
        return "the embedded arithmetic task"
    if getattr(config, "dataset", None):
        return f"`{config.dataset}`"
    columns = getattr(train_dataset, "column_names", None)
    if columns is not None:
        try:
            rows = f"{len(train_dataset)} rows, "
        except TypeError:  # an iterable dataset has no length
            rows = ""
        return f"a dataset passed in code ({rows}columns {', '.join(columns)})"
    return "not recorded (a dataset passed in code)"


def run_section(
    config: Any, base_model: str, data: str | None = None, adapter: bool = False
) -> str:
    """The card's section on the run, in Markdown; ``data``: :func:`data_named`'s text
    (by default from the config alone); ``adapter``: the model is a PEFT adapter."""
    from ..models import ALIASES

    methods = ", ".join(methods_on(config, adapter)) or "none (plain recipe)"
    alias = ALIASES.get(str(config.model))
    built = (
        f" (trained from the alias `{config.model}`: the {alias.filename} build of "
        f"`{alias.distribution}`, dequantised to float32)"
        if alias is not None
        else ""
    )
    lines = [
        "## contrastive-rlvr run",
        "",
        f"- base model: `{base_model}`{built}",
        f"- recipe: `{config.recipe}`",
        f"- methods on: {methods}",
        f"- dataset: {data or data_named(config)}",
        f"- base configuration: `{config.base_config or 'none (built in code)'}`",
        "",
    ]
    return "\n".join(lines)


def card_model_name(config: Any) -> str:
    """What the card calls the trained model: its Hub id when it is pushed, else its
    folder."""
    return str(getattr(config, "hub_model_id", None) or config.output_dir)


def complete_model_card(
    config: Any, model_id: str | None, data: str | None = None, adapter: bool = False
) -> None:
    """Complete TRL's card in ``output_dir``: name the base model where TRL wrote ``None``
    (the config's model, else ``model_id``, the model's own config id; an alias as its
    upstream id), name the model itself where TRL wrote ``None`` (title, the pipeline
    example), link no local path to the Hub, tag the project, recipe and methods, and add
    :func:`run_section` (``data``: what it calls the data, :func:`data_named`)."""
    from ..models import recorded_model_id
    from ..run_files import claim, read_text, write_file

    path = Path(config.output_dir) / "README.md"
    base_model = recorded_model_id(str(config.model_name_or_path or model_id))
    name = card_model_name(config)
    text = read_text(path)
    text = text.replace("# Model Card for None\n", f"# Model Card for {name}\n")
    text = text.replace('model="None"', f"model={name!r}".replace("'", '"'))
    dataset = str(getattr(config, "dataset", None) or "")
    if dataset and Path(dataset).expanduser().exists():  # a local file or folder
        hub_link = f"[{dataset}](https://huggingface.co/datasets/{dataset})"
        text = text.replace(hub_link, f"`{dataset}`")
        text = text.replace(f"datasets: {dataset}\n", "")
    tags = ["contrastive-rlvr", config.recipe, *methods_on(config, adapter)]
    if text.startswith("---\n") and "\ntags:\n" in text:  # TRL's YAML header lists tags
        text = text.replace("\ntags:\n", "\ntags:\n" + "".join(f"- {t}\n" for t in tags), 1)
    on_hub = bool(_HUB_ID.match(base_model)) and not Path(base_model).exists()
    link = f"[{base_model}](https://huggingface.co/{base_model})" if on_hub else f"`{base_model}`"
    text = text.replace("[None](https://huggingface.co/None)", link)
    # the header names a Hub model only (no Hub link for a local model)
    text = text.replace("base_model: None\n", f"base_model: {base_model}\n" if on_hub else "")
    # TRL wrote the card just now: it is the run's (claimed), then replaced whole
    claim(path)
    section = run_section(config, base_model, data, adapter)
    write_file(path.parent, path.name, text.rstrip("\n") + "\n\n" + section)


class ProjectModelCard:
    """Trainer mixin: TRL's ``create_model_card``, then :func:`complete_model_card` on the
    main process (``push_to_hub`` writes its card through here too)."""

    def create_model_card(self, model_name=None, dataset_name=None, tags=None) -> None:
        from trl.trainer.utils import get_config_model_id

        name = model_name or card_model_name(self.args)
        super().create_model_card(name, dataset_name or self.args.dataset, tags)
        if self.is_world_process_zero():
            data = data_named(self.args, getattr(self, "train_dataset", None))
            adapter = hasattr(self.accelerator.unwrap_model(self.model), "peft_config")
            model_id = get_config_model_id(self.model.config)
            complete_model_card(self.args, model_id, data, adapter)


#: The folder under output_dir where ``merge_adapter=true`` saves the merged model.
MERGED_DIR = "merged"


def save_merged(trainer: Any, folder: Path) -> Path:
    """The trained adapter merged into a copy of its base model, saved as a full model
    (weights, config, tokenizer, card) in ``folder``; the trainer's model is left as it
    is. The config records the base by its upstream id where it came from an alias."""
    import copy
    import shutil

    from ..models import recorded_model_id
    from ..run_files import build_folder

    model = copy.deepcopy(trainer.accelerator.unwrap_model(trainer.model)).merge_and_unload()
    model.config._name_or_path = recorded_model_id(model.config._name_or_path)
    card = Path(trainer.args.output_dir) / "README.md"
    # built in a new folder, then renamed into place: no link planted in the old one is
    # followed (run_files.build_folder)
    with build_folder(folder.parent, folder.name) as tmp:
        model.save_pretrained(tmp)
        trainer.processing_class.save_pretrained(tmp)
        if card.is_file() and not card.is_symlink():
            shutil.copyfile(card, tmp / "README.md")
    return folder
