"""One training run end to end: model and data, held-out accuracy before, RL, accuracy after.

The pieces it runs live beside it: :mod:`.run_folder` and :mod:`.output_plan` (what the
output folder holds and what the run may do with it), :mod:`.embedded_inputs` and
:mod:`.custom_inputs` (the model, data, rewards and held-out evaluator of the embedded
default or of the user's model and data), :mod:`.heldout` (the held-out avg@n) and
:mod:`.run_summary` (the settings line, summary.json)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch
from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerState

from ..checkpoints import refused_pickles_as_user_error
from ..errors import AllUpdatesSkipped, NoTrainingSteps
from ..logs import follow_log_level
from ..models import is_relative_path
from ..run_files import write_file
from ..trainer.callbacks import RichProgress
from ..trainer.config import RLVRConfig
from ..trainer.model_options import peft_config_of
from ..trainer.rlvr_trainer import RLVRTrainer
from .folder import CONFIG_FILE, SUMMARY_FILE, save_data_identity, save_resolved_config
from .folder_lock import OutputDirLock
from .output_plan import at_last_step, plan_output_dir
from .preflight import PreflightResult, preflight
from .summary import run_summary, settings_line

logger = logging.getLogger(__name__)
#: What a run says once at its start (field mapping, held-out reward): shown at the
#: default log level (INFO here) unless the run's log_level asks for fewer lines.
start_log = logging.getLogger("contrastive_rlvr.start")


def load_run_inputs(
    config: RLVRConfig, out: Path, checked: PreflightResult | None = None
) -> dict[str, Any]:
    """Model, tokenizer, train dataset, reward functions and held-out evaluator of a run."""
    if config.model == "embedded":
        from .embedded_inputs import embedded_inputs

        return embedded_inputs(config, out)
    from .custom_inputs import custom_inputs

    return custom_inputs(config, checked)


def _distributed_state(config: RLVRConfig):
    """accelerate's process state of the run, as TrainingArguments sets it up (the process
    group of a torchrun launch is made here, as the Trainer would)."""
    _ = config.device  # sets up config.distributed_state
    if config.distributed_state is None:
        from accelerate import PartialState

        return PartialState(cpu=config.use_cpu)
    return config.distributed_state


def _on_main(state: Any, evaluate: Any, model: Any, label: str) -> Any:
    """The held-out evaluation once, on the main process; every process gets its value
    (None without held-out scoring: ``heldout_size=0``). ``label`` (before, after) names
    the file of its samples."""
    if evaluate is None:
        return None
    value = evaluate(model, label=label) if state.is_main_process else None
    if state.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        value = broadcast_object_list([value])[0]
    return value


def train(
    config: RLVRConfig, *, extra_callbacks: list | None = None, progress: bool = True
) -> dict:
    """Run one training job as ``config`` says and return its summary.

    Writes to ``config.output_dir``: ``config.yaml`` (resolved), checkpoints,
    ``metrics.jsonl`` and ``summary.json`` (held-out avg@n before and after RL).
    The folder is locked for the whole run (``folder_lock``): a second run into it
    is refused while this one lives.
    """
    torch.set_num_threads(config.torch_threads)
    out = Path(config.output_dir)
    # Every check that needs no model, before any model loads.
    checked = preflight(config)
    state = _distributed_state(config)
    level = config.get_process_log_level()
    follow_log_level(level)  # --log_level info: the project's INFO
    # The start lines (field mapping, held-out reward) at the default level too.
    start_log.setLevel(min(level, logging.INFO) if level <= logging.WARNING else level)
    # One writer per folder: the main process holds the lock for the whole run (the others
    # only read the folder, after it, and wait for it at each write).
    lock = OutputDirLock(out) if state.is_main_process else contextlib.nullcontext()
    with lock:
        return _train_locked(config, out, checked, extra_callbacks, progress, state)


def _train_locked(
    config: RLVRConfig,
    out: Path,
    checked: PreflightResult,
    extra_callbacks: list | None,
    progress: bool,
    state: Any,
) -> dict:
    # Under several processes (torchrun) every one plans from the folder as it was; only
    # the main process writes it, after all have read it, and builds the embedded warm
    # start while the others wait (they then load it).
    main = state.is_main_process
    data = checked.prompts.fingerprint if checked.prompts is not None else None
    resume, finished = plan_output_dir(config, out, may_write=main, data=data)
    if finished is not None:
        logger.warning(
            "%s: this run finished already (%s); nothing to do (reported below; "
            "overwrite_output_dir=true runs it again)",
            out,
            SUMMARY_FILE,
        )
        if "error" in finished:
            raise AllUpdatesSkipped(f"{out} finished already: {finished['error']}")
        return finished
    state.wait_for_everyone()
    if main:
        out.mkdir(parents=True, exist_ok=True)
        save_resolved_config(config, out / CONFIG_FILE)
        save_data_identity(out, config, data)
    logger.info("base configuration: %s", config.base_config or "none (built in code)")
    logger.info("settings: %s", settings_line(config))
    with state.main_process_first():
        parts = load_run_inputs(config, out, checked)
    started = time.perf_counter()
    before = _on_main(state, parts["evaluate"], parts["model"], "before")
    trainer = RLVRTrainer(
        model=parts["model"],
        reward_funcs=parts["rewards"],
        args=config,
        train_dataset=parts["train"],
        # Held-out evaluation during training (eval_strategy/eval_steps): TRL's own, on the
        # held-out rows, logged as TRL's eval_* metrics.
        eval_dataset=parts["heldout"] if config.eval_strategy != "no" else None,
        processing_class=parts["tokenizer"],
        callbacks=extra_callbacks,
        peft_config=peft_config_of(config),
    )  # the project's callbacks (guards, metrics.jsonl, diagnostics) come with it
    # The held-out scoring of the user's data writes samples/ (the learning-signal
    # warnings point there); the embedded task's generated held-out set writes none.
    trainer.writes_heldout_samples = parts["evaluate"] is not None and config.model != "embedded"
    # The rich bar replaces HF's tqdm bar and its printing of every log dict.
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    if progress:
        trainer.add_callback(RichProgress())
    eval_only = resume is not None and at_last_step(resume, config)
    with refused_pickles_as_user_error(resume):
        if eval_only:
            # Stopped after its last checkpoint, before its summary: the Trainer would train
            # one step more; load the checkpoint and finish with the evaluation only.
            logger.warning("resume: %s is the last step; evaluating only", Path(resume).name)
            trainer._load_from_checkpoint(resume)  # TRL/transformers private API, pinned
            trainer.state = TrainerState.load_from_json(str(Path(resume) / "trainer_state.json"))
        else:
            trainer.train(resume_from_checkpoint=resume)
    # The final model (or adapter) in output_dir, as a TRL script's trainer.save_model does,
    # whatever save_strategy is; with push_to_hub, save_model uploads it with the card.
    trainer.create_model_card()
    trainer.save_model(str(out))  # with merge_adapter, the merged model too (RLVRTrainer's)
    if trainer.accelerator.is_main_process:
        absolute_adapter_base(out)  # an adapter names its base by an absolute path
    after = _on_main(state, parts["evaluate"], trainer.model, "after")
    # Steps of this process's training (a resumed run counts from its checkpoint).
    first = int(resume.rsplit("-", 1)[1]) if resume else 0
    summary = run_summary(
        config,
        trainer,
        before=before,
        after=after,
        started=started,
        train_rows=len(parts["train"]),
        first=first,
        eval_only=eval_only,
        out=out,
    )
    if trainer.accelerator.is_main_process:
        write_file(out, SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    steps_here = trainer.state.global_step - first
    if steps_here == 0 and not eval_only:
        raise NoTrainingSteps(summary["error"])
    if "error" in summary:
        raise AllUpdatesSkipped(f"{summary['error']}; see {out / 'metrics.jsonl'}")
    return summary


def absolute_adapter_base(folder: Path) -> None:
    """Rewrite an adapter folder's relative ``base_model_name_or_path`` (PEFT records the
    path as the run was given it) as the absolute path it meant when the run started, so
    the adapter loads its base from any directory (``models.adapter_base`` refuses a relative
    one)."""
    path = Path(str(folder)) / "adapter_config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if isinstance(base, str) and is_relative_path(base) and Path(base).exists():
        config["base_model_name_or_path"] = str(Path(base).resolve())
        write_file(path.parent, path.name, json.dumps(config, indent=2) + "\n")
