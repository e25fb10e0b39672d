"""What ``RLVRTrainer`` gives a script beyond TRL's trainer, kept out of the hook module:
``help()`` with TRL's parameters, the checks of a script's inputs (``merge_adapter``
without an adapter, conversations without a chat template, plain strings on a chat
model), the merged model on the final ``save_model`` and resumes that do not warn of
tied weights as missing."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, NamedTuple

import torch
from trl import GRPOTrainer

from ..errors import UserError
from .model_card import MERGED_DIR, ProjectModelCard, save_merged
from .prompt_check import check_conversations_have_a_template, warn_plain_prompts


def check_script_inputs(trainer: Any, adapter: bool, name: Any) -> None:
    """Refuse ``merge_adapter`` when no adapter is trained (a script passes
    ``peft_config``; ``use_peft`` alone builds none here) and conversational prompts
    without a chat template; warn once of plain string prompts on a chat model.
    ``name``: the model as the user gave it."""
    config = trainer.args
    if config.merge_adapter and not adapter:
        raise UserError(
            "merge_adapter=True merges a LoRA adapter, but this trainer trains none: pass "
            "peft_config (e.g. peft.LoraConfig(...), or trl.get_peft_config(config) with "
            "use_peft=True), or drop merge_adapter"
        )
    # A vision model's processor may hold the chat template its tokenizer lacks.
    processor = trainer.processing_class
    has_template = any(
        getattr(x, "chat_template", None) is not None for x in (processor, trainer._tokenizer)
    )
    check_conversations_have_a_template(trainer.train_dataset, has_template, name)
    warn_plain_prompts(config, trainer.train_dataset, has_template)


class _LoadResult(NamedTuple):
    """``load_state_dict``'s result, as the Trainer reads it."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def tied_to_a_loaded_key(model: torch.nn.Module, key: str, load_result: Any) -> bool:
    """Whether the missing checkpoint key ``key`` names a tensor the model shares with
    another key that did load (tied weights: the same storage under two names)."""
    tensors = dict(model.state_dict(keep_vars=True))
    tensor = tensors.get(key)
    if tensor is None:
        return False
    missing = set(load_result.missing_keys)
    return any(
        name != key and name not in missing and other.data_ptr() == tensor.data_ptr()
        for name, other in tensors.items()
    )


class ScriptSaving(ProjectModelCard):
    """Trainer mixin: the project's model card (:class:`.ProjectModelCard`), the merged
    model on the final save, and resumes that do not warn of tied weights."""


    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Trainer's ``save_model``; with ``merge_adapter`` the final save (not a
        checkpoint's) also writes the adapter merged into its base to
        ``output_dir/merged``, as ``contrastive-rlvr train`` does."""
        super().save_model(output_dir, _internal_call)
        if self.args.merge_adapter and not _internal_call and self.accelerator.is_main_process:
            save_merged(self, Path(output_dir or self.args.output_dir) / MERGED_DIR)

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """Trainer's warnings after a checkpoint loads, less the one for tied weights: a
        model whose output layer shares the input embedding (SmolLM2, the tiny models)
        saves that tensor once, so the output layer's key is "missing" on every resume
        though the embedding loaded it (the Trainer warned ``missing keys
        ['lm_head.weight']``). Any other missing key is still warned."""
        model = self.accelerator.unwrap_model(self.model)
        missing = [
            k for k in load_result.missing_keys if not tied_to_a_loaded_key(model, k, load_result)
        ]
        if len(missing) != len(load_result.missing_keys):
            load_result = _LoadResult(missing, list(load_result.unexpected_keys))
        super()._issue_warnings_after_load(load_result)


#: What ``help(RLVRTrainer)`` says after the class's first lines, before TRL's text.
BEYOND_TRL = """\
Beyond TRL: ``model`` may also be an alias (``smollm2-135m``, ``tiny-random``), a
``.gguf`` file or a saved adapter folder; the project's callbacks are attached
(``metrics.jsonl``, non-finite guards, diagnostics, the warnings of a run that cannot
learn); ``save_model`` also writes the merged model with ``merge_adapter``. With the
additions off it trains as stock ``GRPOTrainer`` does (docs/trl-parity.md). Prompts reach
the model as given, in TRL's formats; ``contrastive_rlvr.train`` is the command line's
path, which adds the chat template and instruction to string prompts and scores a
held-out split.

Example::

    from contrastive_rlvr import MathVerifyReward, RLVRConfig, RLVRTrainer

    config = RLVRConfig(output_dir="out", recipe="grpo", bicc=True, max_steps=2)
    trainer = RLVRTrainer(model="tiny-random", reward_funcs=MathVerifyReward(),
                          args=config, train_dataset=dataset)
    trainer.train()"""


def document_trls_arguments(cls: type) -> type:
    """``help(cls)`` and ``inspect.signature`` show ``GRPOTrainer``'s parameters (its
    ``__init__`` takes them through ``*rest, **kwargs`` and passes them on), ``args``
    typed as an ``RLVRConfig``, and TRL's own text on them after the class's."""
    trl_signature = inspect.signature(GRPOTrainer.__init__)
    params = [
        p.replace(annotation="RLVRConfig | None") if p.name == "args" else p
        for p in trl_signature.parameters.values()
    ]
    cls.__init__.__signature__ = trl_signature.replace(parameters=params)
    trl_doc = inspect.cleandoc(GRPOTrainer.__doc__ or "")
    own = inspect.cleandoc(cls.__doc__ or "")
    cls.__doc__ = f"{own}\n\n{BEYOND_TRL}\n\nTRL's GRPOTrainer documentation:\n\n{trl_doc}"
    return cls
