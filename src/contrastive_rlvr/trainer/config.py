"""The training configuration: TRL's ``GRPOConfig`` plus this project's groups.

:class:`RLVRConfig` is one dataclass (one YAML file, one set of ``--field``
options) made of the groups in :mod:`.config_groups`, one per concern: model
and data, rewards, held-out evaluation, the run folder, the embedded task, recipe and
loss, BiCC, RCC, token-level methods, diagnostics. Every field is
documented once (its ``help`` is the ``train --help`` text) and validated in
``__post_init__`` before any model loads: each group checks its own fields,
this class the combinations; an invalid value raises a ``ValueError`` naming the
field, the value and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from trl import GRPOConfig, ModelConfig

from ..algorithms import check_token_method_compat
from ..errors import UserError
from .config_groups import CUSTOM_ONLY, GROUPS, check, finite
from .trl_script_layout import install as _install_trl_script_layout
from .trl_settings import check_project_loss_options

# TrlParser((ScriptArguments, RLVRConfig, ModelConfig)): each shared field one option.
_install_trl_script_layout()


#: TRL's defaults of the sampling fields a ``generation_kwargs`` key may override.
TRL_SAMPLING_DEFAULTS = {"top_p": 1.0, "top_k": 0, "min_p": None, "repetition_penalty": 1.0}


def prompt_sharing_of(config: Any, num_processes: int, dataset, tokenizer, model) -> Any:
    """The run's :class:`~contrastive_rlvr.shared_forward.sharing.PromptSharing` from the
    config's fields (``share_prefix`` counts with BiCC on), proven at the widest forward
    its ``dataset`` can reach."""
    from ..shared_forward.sharing import PromptSharing, dataset_reachable_width

    conditioned = bool(config.bicc and config.share_prefix)
    sharing = PromptSharing(
        conditioned=conditioned,
        plain=config.share_plain_prompt,
        gradient_checkpointing=config.gradient_checkpointing,
        num_processes=num_processes,
    )
    if sharing.active:
        sharing.max_width = dataset_reachable_width(
            dataset,
            tokenizer,
            model,
            max_completion_length=config.max_completion_length,
            bicc_context_ratio=config.bicc_context_ratio if config.bicc else None,
            bicc_max_seq_len=config.bicc_max_seq_len,
        )
    return sharing


def sampling_settings(config: Any) -> dict[str, Any]:
    """What training samples with, as ``generate`` keywords: the sampling fields
    (``temperature``, ``top_p``, ``top_k``, ``min_p`` when set, ``repetition_penalty``),
    then ``generation_kwargs`` over them (TRL's order). The held-out scoring and
    ``premise`` sample with these, so all three draw from one distribution."""
    settings: dict[str, Any] = {
        "temperature": config.temperature,
        "top_p": config.top_p,
        "top_k": config.top_k or 0,
        "repetition_penalty": config.repetition_penalty,
    }
    if config.min_p is not None:
        settings["min_p"] = config.min_p
    settings.update(config.generation_kwargs or {})
    return settings


def _sampling_options(use_vllm: bool) -> tuple[frozenset[str] | None, str]:
    """The option names of what samples the completions, and its name: transformers'
    ``GenerationConfig`` (its attributes), or vLLM's ``SamplingParams`` (None when vLLM
    is not installed)."""
    if use_vllm:
        try:
            from vllm import SamplingParams
        except ImportError:
            return None, "vLLM's SamplingParams"
        import inspect

        return frozenset(inspect.signature(SamplingParams).parameters), "vLLM's SamplingParams"
    from transformers import GenerationConfig

    names = {k for k in vars(GenerationConfig()) if not k.startswith("_")}
    return frozenset(names), "transformers' GenerationConfig"


@dataclass
class RLVRConfig(*GROUPS, ModelConfig, GRPOConfig):
    """Configuration of a contrastive-rlvr training run (extends ``trl.GRPOConfig`` and
    carries ``trl.ModelConfig``'s fields, so a TRL script's YAML and options work as they
    are: ``model_name_or_path`` (the same as ``model``), ``dtype``, ``attn_implementation``,
    ``model_revision``, ``use_peft`` and the ``lora_*`` fields, ``load_in_4bit``/``8bit``).

    Fields left ``None`` take the recipe's paper default (see the README's
    recipe table); the resolved values are what ``config.yaml`` in the output
    directory records. The fields and their checks live in the groups of
    :mod:`contrastive_rlvr.trainer.config_groups`.
    """

    #: TRL's script layout (:mod:`.trl_script_layout`): this config carries ScriptArguments'
    #: and ModelConfig's fields, so beside them in one TrlParser each is one option.
    _carries_trl_script_fields = True

    # TRL's base config declares the deprecated ``gradient_checkpointing`` with the default
    # True, so transformers warned that it is deprecated on every config built (every
    # command, ``--help`` too). Both names default to unset here and TRL's default goes
    # to the new name in __post_init__; a user who sets the old name still gets
    # transformers' warning (and the value).
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={
            "help": "Deprecated alias of activation_checkpointing (transformers removes it in v6).",
            "nargs": "?",
            "const": True,
        },
    )

    def __post_init__(self) -> None:
        if self.activation_checkpointing is None and self.gradient_checkpointing is None:
            self.activation_checkpointing = True  # TRL's default
        self._validate_ranges()
        self.validate_data()
        self.validate_rewards()
        self.validate_heldout()
        self.validate_run_folder()
        self.validate_embedded()
        self._validate_embedded_model()
        self.validate_recipe()
        self.validate_bicc()
        self.validate_rcc()
        self.validate_diagnostics()
        self.resolve_recipe_defaults()
        self.resolve_bicc_defaults()
        self.validate_token_methods()
        self._validate_combinations()
        if self.bf16 is None and not self.fp16:
            # TRL defaults to bf16, which transformers refuses on a CPU-only machine.
            self.bf16 = torch.cuda.is_available() and not self.use_cpu
        if not torch.cuda.is_available() or self.use_cpu:
            # Pinned memory speeds copies to a GPU; without one torch warns on every
            # DataLoader that it is set and unused.
            self.dataloader_pin_memory = False
        # Both TRL parents' checks (neither calls the other's).
        ModelConfig.__post_init__(self)
        try:
            GRPOConfig.__post_init__(self)  # turns a JSON generation_kwargs into a dict
        except ValueError as err:
            raise self._gpu_config_on_cpu(err) from err
        self._validate_generation_kwargs()
        self.validate_recipe_layout()
        self.validate_seed_layout()
        self._validate_whole_groups()

    def _gpu_config_on_cpu(self, err: ValueError) -> ValueError:
        """transformers' refusal of half precision on a machine without a GPU ("Your setup
        doesn't support bf16/gpu") as one line naming the overrides a GPU recipe needs on
        a CPU; any other error as it is."""
        if "support bf16/gpu" not in str(err) and "support fp16" not in str(err):
            return err
        asked = [f"{n}=true" for n in ("bf16", "fp16", "use_vllm") if getattr(self, n, False)]
        fixes = " ".join(f"--{n.split('=')[0]} false" for n in asked)
        return UserError(
            f"this config asks for a GPU ({', '.join(asked)}) and this machine has none: on "
            f"a CPU add {fixes} (and a small --model and --max_completion_length for a run "
            "that ends), or run it on a GPU"
        )

    def _validate_ranges(self) -> None:
        """Values TRL's ``TrainingArguments`` accepts but no run can use (a NaN learning
        rate, ``max_steps=-5``), refused before TRL's own checks and any model load."""
        lr = self.learning_rate
        check(finite(lr) and lr > 0, "learning_rate", lr, "must be a finite number > 0")
        t = self.temperature
        check(finite(t) and t > 0, "temperature", t, "sampling needs a finite temperature > 0")
        check(finite(self.top_p) and 0 < self.top_p <= 1, "top_p", self.top_p, "must be in (0, 1]")
        # numpy's seeding takes 0..2**32-1; a negative seed failed after the model loaded
        seed = self.seed
        check(isinstance(seed, int) and 0 <= seed < 2**32, "seed", seed, "must be in 0..2**32-1")
        if self.max_steps == -1:
            epochs = self.num_train_epochs
            check(
                finite(epochs) and epochs > 0,
                "max_steps=-1 with num_train_epochs",
                epochs,
                "with max_steps=-1 the run length is num_train_epochs, which must be > 0",
            )
        else:
            check(
                self.max_steps >= 1,
                "max_steps",
                self.max_steps,
                "give a number of optimizer steps >= 1, or -1 to train for num_train_epochs",
            )
        for name in ("max_completion_length", "per_device_train_batch_size"):
            value = getattr(self, name)
            check(value is None or value >= 1, name, value, "must be >= 1")
        accum = self.gradient_accumulation_steps
        check(accum >= 1, "gradient_accumulation_steps", accum, "must be >= 1")
        for name in ("weight_decay", "adam_epsilon"):
            value = getattr(self, name)
            check(finite(value), name, value, "must be a finite number")
        check(self.adam_epsilon > 0, "adam_epsilon", self.adam_epsilon, "must be > 0")
        for name in ("adam_beta1", "adam_beta2"):
            value = getattr(self, name)
            check(finite(value) and 0 <= value < 1, name, value, "must be in [0, 1)")
        norm = self.max_grad_norm
        check(
            norm is None or (finite(norm) and norm >= 0),
            "max_grad_norm",
            norm,
            "must be finite and >= 0",
        )
        weights = self.reward_weights
        check(
            weights is None or all(finite(w) for w in weights),
            "reward_weights",
            weights,
            "every weight must be finite",
        )

    def __getstate__(self) -> dict:
        """What pickling stores (the Trainer's ``training_args.bin`` beside every checkpoint
        and the final model): every field but the secrets, the ``*_token`` fields
        (``hub_token``), which are never written to disk in clear (``config.yaml`` hides
        them too, as ``to_dict`` does). A pickled copy has no token: the upload reads the
        token of the process that parsed the config."""
        from ..redaction import is_secret_name, strip_secrets

        state = self.__dict__.copy()
        for key in state:
            if is_secret_name(key) and state[key] is not None:
                state[key] = None
        # a token inside model_init_kwargs ({"token": ...}) too: one secrets rule
        state["model_init_kwargs"] = strip_secrets(state.get("model_init_kwargs"))
        return state

    def to_dict(self) -> dict:
        """transformers' dict of the fields (enums as values, ``*_token`` fields hidden),
        with every other secret hidden too (:func:`~contrastive_rlvr.redaction.redact`:
        a token in ``model_init_kwargs``): what config.yaml and compare's results hold."""
        from ..redaction import redact

        return redact(super().to_dict())

    def _validate_generation_kwargs(self) -> None:
        """Every ``generation_kwargs`` key is an option of what samples (transformers'
        ``GenerationConfig``, or vLLM's ``SamplingParams`` with ``use_vllm``):
        ``GenerationConfig`` keeps an unknown key as an attribute without a word.

        As in TRL, the keys override the sampling fields (``top_p``, ``top_k``, ``min_p``,
        ``repetition_penalty``), and the held-out scoring and ``premise`` sample with them
        too (:func:`sampling_settings`); a field set away from TRL's default to another
        value than its key is refused (one of the two would be ignored). ``temperature``
        and the length keys stay refused: the loss scores log-probs at the ``temperature``
        field and measures completions against ``max_completion_length``, so a sampling
        value of its own would make both wrong."""
        kwargs = self.generation_kwargs
        if kwargs is None:
            return
        if not isinstance(kwargs, dict):
            raise UserError(
                f"generation_kwargs={kwargs!r} is invalid: give a mapping of option: value "
                "(on the command line a JSON object, e.g. '{\"num_beams\": 2}')"
            )
        own_field = {
            "temperature": "temperature", "max_new_tokens": "max_completion_length",
            "max_tokens": "max_completion_length",
        }  # fmt: skip
        for key in kwargs:
            if key in own_field:
                raise UserError(
                    f"generation_kwargs: {key!r} must be set as {own_field[key]} instead (the "
                    f"loss reads {own_field[key]}: a sampling value of its own would make the "
                    "log-probs or the length accounting wrong)"
                )
        for key, default in TRL_SAMPLING_DEFAULTS.items():
            field_value = getattr(self, key)
            if key in kwargs and field_value != default and field_value != kwargs[key]:
                raise UserError(
                    f"{key}={field_value} and generation_kwargs {key!r}: {kwargs[key]} disagree "
                    f"(generation_kwargs would win, as in TRL); set one of the two"
                )
        valid, sampler = _sampling_options(self.use_vllm)
        if valid is None:
            return  # vLLM is not installed here: the run itself will say so
        unknown = sorted(k for k in kwargs if k not in valid)
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown[0], sorted(valid), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UserError(
                f"generation_kwargs: {', '.join(map(repr, unknown))} is not an option of "
                f"{sampler}{hint}; remove it, or use one of {sampler}'s options"
            )

    def _validate_embedded_model(self) -> None:
        """No custom-data field (the data and reward groups') with the embedded model."""
        if self.model != "embedded":
            return
        for name, default in CUSTOM_ONLY.items():
            value = getattr(self, name)
            if value != default:
                raise UserError(
                    f"{name}={value!r} is given with model='embedded', which brings its own "
                    f"arithmetic task and reward; drop --{name}, or set --model to the "
                    "model to train on this dataset"
                )

    def _validate_combinations(self) -> None:
        """Checks across groups: the methods that can be combined with the recipe."""
        check_token_method_compat(
            self.recipe,
            verigate=self.verigate,
            reco=self.reco,
            oc_grpo=self.oc_grpo,
            bicc=self.bicc,
            rcc=self.rcc,
            dynamic_sampling=self.dynamic_sampling,
        )
        if (self.verigate or self.oc_grpo) and self.rcc and self.rcc_reference == "sampling":
            method = "verigate" if self.verigate else "oc_grpo"
            raise ValueError(
                f"{method}=True and rcc_reference='sampling' cannot be combined: the sampling "
                "reference recomputes per-row advantages at loss time, which would drop "
                f"{method}'s advantages; use rcc_reference='reference'"
            )
        check_project_loss_options(self)

    def _validate_whole_groups(self) -> None:
        """ConSPO and RCC's sampling reference need whole groups in every micro-batch."""
        g = self.num_generations
        whole_groups_needed = self.recipe == "conspo" or (
            self.rcc and self.rcc_reference == "sampling"
        )
        if whole_groups_needed and self.per_device_train_batch_size % g != 0:
            what = "recipe='conspo'" if self.recipe == "conspo" else "rcc_reference='sampling'"
            raise ValueError(
                f"per_device_train_batch_size={self.per_device_train_batch_size} is invalid "
                f"with {what}: "
                f"the loss needs whole groups in every micro-batch, so it must be a multiple of "
                f"num_generations={g}"
            )
