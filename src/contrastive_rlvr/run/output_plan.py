"""What a run does with its output folder, decided before any model loads: start afresh,
report the same finished run, resume from which checkpoint, or refuse (the folder holds
another run or the user's files, or a resume would continue with other settings or on
other data than the run recorded)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml

from ..checkpoints import checkpoint_problems, list_checkpoints, newest_complete_checkpoint
from ..errors import UserError
from ..run_files import read_bytes, read_json, read_text, write_file
from ..trainer.config import RLVRConfig
from .config_compare import config_differences
from .folder import (
    CONFIG_FILE,
    DATA_FILE,
    SUMMARY_FILE,
    check_foreign_files,
    clear_run,
    holds_run,
    written_by_a_run,
)
from .identity import identity_differences, identity_of, model_shape

logger = logging.getLogger(__name__)


def plan_output_dir(
    config: RLVRConfig, out: Path, *, may_write: bool = True, data: dict | None = None
) -> tuple[str | None, dict | None]:
    """``(checkpoint to resume from, summary of a finished run)`` for ``config``; refuses
    (``UserError``) a fresh run into a directory that holds another run or files no run
    wrote, a resume with a changed config or changed data (``data``: the fingerprint of
    the dataset now, :class:`~contrastive_rlvr.data.LoadedPrompts`), and a resume with no
    complete checkpoint. Nothing is loaded. ``may_write=False`` (processes other than the
    main one): the same answer, and the main process alone removes a run that
    ``overwrite_output_dir`` replaces."""
    if not config.resume:
        return _plan_fresh_run(config, out, may_write=may_write, data=data)
    _check_config_unchanged(config, out)
    _check_data_unchanged(config, out, data)
    summary_file = out / SUMMARY_FILE
    if summary_file.exists():
        try:
            summary = read_json(summary_file)
        except ValueError:
            logger.warning("%s does not parse: resuming the run", summary_file)
        else:
            if not _extends(config, summary):
                return None, summary
            # max_steps raised past the finished run's (the config check let it through,
            # so resume_allow_config_change is set): train on from its last checkpoint.
            logger.warning(
                "resume: extending the finished run from %s to %d steps (its summary kept "
                "as summary.before-resume.json)",
                summary.get("steps"),
                config.max_steps,
            )
            os.replace(summary_file, out / "summary.before-resume.json")
    named = _named_checkpoint(config)
    if named is not None:
        _check_named_checkpoint(config, Path(named), out)
        logger.warning("resume: from %s (resume_from_checkpoint)", named)
        return named, None
    return _newest_checkpoint(out), None


def _plan_fresh_run(
    config: RLVRConfig, out: Path, *, may_write: bool, data: dict | None = None
) -> tuple[str | None, dict | None]:
    """:func:`plan_output_dir` without ``resume``: refuse a folder holding the user's
    config.yaml or files, or another run unless ``overwrite_output_dir`` (then the main
    process removes it); the same finished run is reported."""
    own = out / CONFIG_FILE
    if own.is_file() and not written_by_a_run(own):
        raise UserError(
            f"output_dir={str(out)!r} holds a config.yaml that no run wrote (your own "
            "config file?); a run writes its config.yaml there, so choose another "
            "output_dir or move the file (overwrite_output_dir never replaces it)"
        )
    check_foreign_files(config, out, may_write=may_write)
    found = holds_run(out)
    if found:
        finished = None if config.overwrite_output_dir else same_finished_run(config, out, data)
        if finished is not None:  # the same command again (make demo twice)
            return None, finished
        if not config.overwrite_output_dir:
            raise UserError(
                f"output_dir={str(out)!r} already holds a run ({', '.join(found[:4])}); "
                "resume it with resume=true, choose another output_dir, or set "
                "overwrite_output_dir=true to replace it"
            )
        if may_write:
            logger.warning("%s: replacing the run it holds (%s)", out, ", ".join(found))
            clear_run(out)
    return None, None


def _newest_checkpoint(out: Path) -> str:
    """The newest complete checkpoint in ``out`` to resume from, the newer incomplete ones
    logged as skipped; refused when there is none (none at all, weights only, or none
    complete)."""
    checkpoint, skipped = newest_complete_checkpoint(out)
    if checkpoint is None:
        if not skipped:
            raise UserError(
                f"resume=True but {out} holds no checkpoint-* directory to resume from; "
                "start it without resume"
            )
        detail = "; ".join(f"{p.name}: {', '.join(why)}" for p, why in skipped)
        if all(_weights_only(why) for _, why in skipped):
            raise UserError(
                f"resume=True but the checkpoints in {out} hold the weights only "
                f"(save_only_model=true: {detail}), which a run cannot resume from; to "
                f"go on from {skipped[0][0].name}, train with --model {skipped[0][0]} in "
                "another output_dir (overwrite_output_dir=true would delete these weights)"
            )
        raise UserError(
            f"resume=True but no checkpoint in {out} is complete ({detail}); start the run "
            "again with overwrite_output_dir=true"
        )
    for path, why in skipped:
        logger.warning("resume: skipped incomplete %s (%s)", path.name, "; ".join(why))
    logger.warning("resume: from %s", checkpoint)
    return str(checkpoint)


def same_finished_run(config: RLVRConfig, out: Path, data: dict | None = None) -> dict | None:
    """The summary of the finished run in ``out`` when ``config`` is that run's config (the
    same command again): it is reported, not refused nor run again. None otherwise (no
    whole summary, a run that stopped with an error, or any training field different).
    The same config on other inputs (``data``: the dataset's fingerprint now; the reward's
    code, a dataset folder, the model's files: :mod:`.run_identity`) is refused naming
    what changed: the old numbers are not this command's."""
    try:
        summary = read_json(out / SUMMARY_FILE)
        saved = yaml.safe_load(read_text(out / CONFIG_FILE))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if not isinstance(summary, dict) or "error" in summary or not isinstance(saved, dict):
        return None
    if not written_by_a_run(out / CONFIG_FILE) or config_differences(saved, config.to_dict()):
        return None
    change = inputs_changed(config, out, data)
    if change is not None:
        raise UserError(
            f"output_dir={str(out)!r} holds a finished run of these settings, but {change}: "
            "its results are not this command's; set overwrite_output_dir=true to train "
            "again, or choose another output_dir"
        )
    return summary


def inputs_changed(config: RLVRConfig, folder: Path, data: dict | None) -> str | None:
    """What of the run's inputs differs from what the run in ``folder`` recorded in its
    ``data.json`` (the dataset file's content, then its identity); None: the same, or
    nothing recorded."""
    from ..data import fingerprint_differences

    try:
        saved = read_json(folder / DATA_FILE)
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict):
        return None
    if data is not None:
        change = fingerprint_differences(saved, data)
        if change is not None:
            return f"dataset={config.dataset!r} changed ({change})"
    return identity_differences(saved.get("identity"), identity_of(config))


def _check_named_checkpoint(config: RLVRConfig, checkpoint: Path, out: Path) -> None:
    """``resume_from_checkpoint=PATH`` of another run: refused when that run was made with
    other training settings or inputs (unless ``resume_allow_config_change``), and always
    when its weights are of another shape than ``model``'s (they cannot load into it)."""
    model = Path(str(config.model or "")).expanduser()
    have, want = model_shape(checkpoint), model_shape(model) if model.is_dir() else None
    if have and want and have != want:
        keys = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
        diff = ", ".join(f"{k}: {have.get(k)} there, {want.get(k)} here" for k in keys)
        raise UserError(
            f"resume_from_checkpoint={str(checkpoint)!r} holds weights of another shape than "
            f"model={config.model!r} ({diff}); resume with that run's model, or give a "
            "checkpoint of this one"
        )
    run = checkpoint.parent
    if run.resolve() == out.resolve() or not (run / CONFIG_FILE).is_file():
        return  # this run's own checkpoint (checked above), or one of no run folder
    try:
        saved = yaml.safe_load(read_text(run / CONFIG_FILE))
    except (OSError, ValueError, yaml.YAMLError):
        return
    if not isinstance(saved, dict) or not written_by_a_run(run / CONFIG_FILE):
        return
    diffs = config_differences(saved, config.to_dict())
    change = "; ".join(diffs) if diffs else inputs_changed(config, run, None)
    if change is None:
        return
    what = f"resume_from_checkpoint={str(checkpoint)!r} is of a run made otherwise ({change})"
    if config.resume_allow_config_change:
        logger.warning("%s; continuing as resume_allow_config_change=true says", what)
        return
    raise UserError(
        f"{what}; resume from a checkpoint of this run, or set resume_allow_config_change=true "
        "to continue from it anyway"
    )


def _check_config_unchanged(config: RLVRConfig, out: Path) -> None:
    """Refuse a resume whose training fields differ from the run's config.yaml, and one
    whose config.yaml is gone or does not parse (its settings cannot be checked)."""
    saved_file = out / CONFIG_FILE
    allow = "set resume_allow_config_change=true to continue with this config's settings"
    saved = None
    if not saved_file.is_file():
        if not (list_checkpoints(out) or (out / SUMMARY_FILE).exists()):
            return  # nothing to resume: said below
        problem = "is missing"
    else:
        from ..trainer.parse import YAMLTooLarge, safe_yaml

        try:
            saved = safe_yaml(read_text(saved_file))
            problem = None if isinstance(saved, dict) else "holds no mapping of fields"
        except (yaml.YAMLError, YAMLTooLarge, ValueError) as err:
            problem = f"does not parse ({' '.join(str(err).split())[:120]})"
    if problem is not None:
        if not config.resume_allow_config_change:
            raise UserError(
                f"resume=True but {saved_file} {problem}, so the run's settings cannot be "
                f"checked against these: put the file back, or {allow}"
            )
        logger.warning("resume: %s %s; continuing with this config", saved_file, problem)
        return
    diffs = config_differences(saved, config.to_dict())
    if not diffs:
        return
    if config.resume_allow_config_change:
        logger.warning("resuming with a changed config: %s", "; ".join(diffs))
        write_file(out, "config.before-resume.yaml", read_bytes(saved_file))
        return
    raise UserError(
        f"resume=True with a config that differs from {saved_file} in {len(diffs)} training "
        f"field(s): {'; '.join(diffs)}. Resume with the same settings, or set "
        "resume_allow_config_change=true to continue with the new ones"
    )


def _check_data_unchanged(config: RLVRConfig, out: Path, fingerprint: dict | None) -> None:
    """Refuse a resume whose dataset's content differs from the one the run recorded
    (``data.json``): the rest of the run would train on other data without a word."""
    from ..data import fingerprint_differences

    record_file = out / DATA_FILE
    if not record_file.is_file():
        return  # the embedded task, or a run recorded before data.json existed
    try:
        saved = read_json(record_file)
    except ValueError:  # not JSON, or not a regular file: differs from any data
        saved = {}
    saved = saved if isinstance(saved, dict) else {}
    change = None if fingerprint is None else fingerprint_differences(saved, fingerprint)
    if change is None:
        other = identity_differences(saved.get("identity"), identity_of(config))
        if other is None:
            return
        what = f"the run in {out} was made with other inputs: {other}"
    else:
        what = f"dataset={config.dataset!r} is not the data the run in {out} trained on ({change})"
    if config.resume_allow_config_change:
        logger.warning("resume: %s; continuing on the new data", what)
        write_file(out, "data.before-resume.json", read_bytes(record_file))
        return
    raise UserError(
        f"resume=True but {what}: put the file back as it was, start a new run in another "
        "output_dir, or set resume_allow_config_change=true to continue on the new data"
    )


def _named_checkpoint(config: RLVRConfig) -> str | None:
    """``resume_from_checkpoint=PATH`` (TRL's option): that checkpoint, refused unless it
    is a whole one; None when no path is named (resume from the newest in output_dir)."""
    named = config.resume_from_checkpoint
    if not named:
        return None
    path = Path(named).expanduser()
    newest = "or true for the newest complete checkpoint in output_dir"
    if not path.is_dir():
        raise UserError(
            f"resume_from_checkpoint={named!r}: no such folder; give a checkpoint-N folder "
            f"of a run, {newest}"
        )
    problems = checkpoint_problems(path)
    if problems:
        raise UserError(
            f"resume_from_checkpoint={named!r} is not complete ({'; '.join(problems)}); give "
            f"another checkpoint, {newest}"
        )
    return str(path)


def at_last_step(checkpoint: str, config: RLVRConfig) -> bool:
    """Whether ``checkpoint`` is at (or past) the run's last step (max_steps > 0 only)."""
    if config.max_steps < 1:
        return False
    state = read_json(Path(checkpoint) / "trainer_state.json")
    return int(state["global_step"]) >= config.max_steps


def _extends(config: RLVRConfig, summary: dict) -> bool:
    """Whether ``config`` asks for more steps than the finished run ``summary`` made."""
    steps = summary.get("steps")
    return (
        "error" not in summary
        and isinstance(steps, int)
        and config.max_steps >= 1
        and config.max_steps > steps
    )


def _weights_only(problems: list[str]) -> bool:
    """A checkpoint whose only problems are the optimizer and scheduler files missing: one
    saved with ``save_only_model=true``."""
    return bool(problems) and all(
        p in ("optimizer.pt is missing", "scheduler.pt is missing") for p in problems
    )
