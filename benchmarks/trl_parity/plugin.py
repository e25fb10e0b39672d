"""pytest plugin that runs TRL's extracted GRPO tests offline, in one of two modes.

Loaded with ``-p trl_parity.plugin`` (``benchmarks/`` on ``sys.path``) by
``benchmarks/trl_parity/run.py``. Environment:

``TRL_PARITY_MODE``
    ``stock`` (default): the tests run against ``trl.GRPOTrainer`` unchanged.
    ``rlvr``: the name ``GRPOTrainer`` in every collected test module resolves to
    :class:`ParityTrainer`, a subclass of the public ``contrastive_rlvr.trainer.RLVRTrainer``
    that only converts the test's ``GRPOConfig`` into an ``RLVRConfig`` (same fields, plus
    :data:`PARITY_FIELDS`) and otherwise passes its arguments through untouched, so a
    required argument of ``RLVRTrainer`` stays required.
``TRL_PARITY_RESULTS``
    Path of the JSON file the per-test outcomes are written to.
``TRL_PARITY_TIMEOUT``
    Seconds one test may run before it is failed (default 600; 0: no limit).
``HF_HUB_CACHE``
    The private hub cache holding the tiny stand-in models (:mod:`trl_parity.tiny_hub`).

Offline handling: ``datasets.load_dataset`` is replaced by the in-memory stand-ins; a
test that names a Hub model or dataset without a stand-in is skipped with that id as the
reason, in both modes alike.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import signal
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

from . import tiny_hub

MODE = os.environ.get("TRL_PARITY_MODE", "stock")
if MODE not in ("stock", "rlvr"):
    raise pytest.UsageError(f"TRL_PARITY_MODE={MODE!r} is invalid: use 'stock' or 'rlvr'")
if "HF_HUB_CACHE" not in os.environ:
    raise pytest.UsageError("HF_HUB_CACHE is not set: run through benchmarks/trl_parity/run.py")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# What the subclass is asked to be: plain GRPO with every project addition off.
PARITY_FIELDS: dict[str, Any] = {
    "recipe": "grpo",
    "bicc": False,
    "rcc": False,
    "log_delta": False,
    "diagnostics_every": 0,
    "deltas_every": 0,
}
# Orgs whose "org/name" strings in a test are Hub repositories (not metric names).
HUB_ORGS = (
    "trl-internal-testing",
    "Qwen",
    "HuggingFaceTB",
    "kernels-community",
    "meta-llama",
    "google",
    "openai",
    "mistralai",
)
_HUB_ID = re.compile(r"^(" + "|".join(map(re.escape, HUB_ORGS)) + r")/[\w.\-]+$")
_RESULTS: dict[str, dict[str, Any]] = {}


# --------------------------------------------------------------------------- set-up
def pytest_configure(config: pytest.Config) -> None:
    import torch

    torch.set_num_threads(1)
    tiny_hub.ensure_hub_cache(
        Path(os.environ["HF_HUB_CACHE"]), log=lambda m: print(m, file=sys.stderr)
    )
    import datasets

    datasets.load_dataset = tiny_hub.load_dataset_offline
    import trl.import_utils as iu

    # TRL's testing_utils (newer than the installed trl) imports this helper.
    if not hasattr(iu, "is_joblib_available"):
        iu.is_joblib_available = lambda: importlib.util.find_spec("joblib") is not None
    if MODE == "rlvr":
        _record_grpo_config_kwargs()


# --------------------------------------------------------------------------- rlvr mode
def _record_grpo_config_kwargs() -> None:
    """Make every ``GRPOConfig`` remember the arguments it was built with.

    The conversion to ``RLVRConfig`` replays those (not the values ``__post_init__``
    derived from them, which would conflict on re-validation), plus any field the
    test changed after construction.
    """
    from trl import GRPOConfig

    original = GRPOConfig.__init__
    if getattr(original, "_trl_parity", False):
        return
    names = [f.name for f in dataclasses.fields(GRPOConfig) if f.init]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if type(self) is GRPOConfig:
            given = dict(zip(names, args, strict=False)) | kwargs
            object.__setattr__(self, "_trl_parity_given", given)
            object.__setattr__(
                self, "_trl_parity_after_init", {n: _freeze(getattr(self, n, None)) for n in names}
            )

    __init__._trl_parity = True  # type: ignore[attr-defined]
    GRPOConfig.__init__ = __init__


def _freeze(value: Any) -> str:
    return repr(value)


def to_rlvr_config(cfg: Any) -> Any:
    """The ``RLVRConfig`` equivalent of a test's ``GRPOConfig`` (other values pass through).

    Fields: those the test passed, those it changed afterwards, and for fields whose
    default ``RLVRConfig`` changes TRL's value (``beta`` no longer differs: 0.0 in both),
    so the subclass runs the configuration the test means. Then :data:`PARITY_FIELDS`.
    """
    from trl import GRPOConfig

    from contrastive_rlvr.trainer import RLVRConfig

    if not isinstance(cfg, GRPOConfig) or isinstance(cfg, RLVRConfig):
        return cfg
    given = getattr(cfg, "_trl_parity_given", None)
    if given is None:
        raise RuntimeError("GRPOConfig built before the trl-parity plugin was configured")
    kwargs = dict(given)
    after = cfg._trl_parity_after_init
    for name, frozen in after.items():
        if name not in kwargs and _freeze(getattr(cfg, name, None)) != frozen:
            kwargs[name] = getattr(cfg, name)
    trl_defaults = {f.name: f for f in dataclasses.fields(GRPOConfig) if f.init}
    for f in dataclasses.fields(RLVRConfig):
        base = trl_defaults.get(f.name)
        if base is None or f.name in kwargs or not f.init:
            continue
        if base.default is not f.default and base.default is not dataclasses.MISSING:
            kwargs[f.name] = base.default
    kwargs.update(PARITY_FIELDS)
    return RLVRConfig(**kwargs)


def _parity_trainer_class() -> type:
    from contrastive_rlvr.trainer import RLVRTrainer

    class ParityTrainer(RLVRTrainer):
        """``RLVRTrainer`` with the test's ``GRPOConfig`` converted; nothing else changed."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if "args" in kwargs:
                kwargs["args"] = to_rlvr_config(kwargs["args"])
            elif len(args) >= 3:
                args = (*args[:2], to_rlvr_config(args[2]), *args[3:])
            super().__init__(*args, **kwargs)

    ParityTrainer.__name__ = ParityTrainer.__qualname__ = "ParityTrainer"
    return ParityTrainer


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    from trl import GRPOTrainer

    modules = {id(it.module): it.module for it in items if getattr(it, "module", None)}
    if MODE == "rlvr":
        trainer = _parity_trainer_class()
        for module in modules.values():
            if getattr(module, "GRPOTrainer", None) is GRPOTrainer:
                module.GRPOTrainer = trainer
    for item in items:
        missing = sorted(i for i in _hub_ids(item) if not _has_stand_in(i))
        if missing:
            item.add_marker(
                pytest.mark.skip(reason=f"offline: no stand-in for Hub repo {', '.join(missing)}")
            )


def _strings(code: types.CodeType) -> set[str]:
    out = {c for c in code.co_consts if isinstance(c, str)}
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _strings(c)
    return out


def _hub_ids(item: pytest.Item) -> set[str]:
    """Hub repo ids a test names: in its body (not its decorators) and its parameters."""
    ids: set[str] = set()
    func = getattr(item, "function", None)
    if func is not None and hasattr(func, "__code__"):
        ids |= {s for s in _strings(func.__code__) if _HUB_ID.match(s)}
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        ids |= {v for v in callspec.params.values() if isinstance(v, str) and _HUB_ID.match(v)}
    return ids


def _has_stand_in(repo_id: str) -> bool:
    return repo_id in tiny_hub.MODELS or repo_id in tiny_hub.DATASETS


# --------------------------------------------------------------------------- per-test limit
class TestTimeout(Exception):
    """Raised in a test that ran past ``TRL_PARITY_TIMEOUT`` seconds."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    limit = int(os.environ.get("TRL_PARITY_TIMEOUT", "600"))
    if limit <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def _expire(signum: int, frame: Any) -> None:
        raise TestTimeout(f"test ran past TRL_PARITY_TIMEOUT={limit}s")

    previous = signal.signal(signal.SIGALRM, _expire)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------- results
_STARTED = time.monotonic()


def _first_line(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # skip: (file, line, reason)
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.strip().splitlines()[0] if crash.message.strip() else ""
    text = str(longrepr or "").strip()
    lines = [ln for ln in text.splitlines() if ln.startswith("E ")]
    return (lines[0][1:].strip() if lines else text.splitlines()[-1] if text else "")[:500]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _RESULTS.setdefault(
        report.nodeid, {"outcome": "passed", "message": "", "duration": 0.0}
    )
    entry["duration"] = round(entry["duration"] + report.duration, 3)
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            entry["outcome"] = "xfailed" if report.skipped else "xpassed"
            entry["message"] = str(report.wasxfail)
        elif report.failed:
            entry["outcome"], entry["message"] = "failed", _first_line(report)
        elif report.skipped:
            entry["outcome"], entry["message"] = "skipped", _first_line(report)
    elif report.failed:  # setup or teardown error
        entry["outcome"], entry["message"] = "error", f"[{report.when}] {_first_line(report)}"
    elif report.skipped and report.when == "setup":
        entry["outcome"], entry["message"] = "skipped", _first_line(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("TRL_PARITY_RESULTS")
    if not path:
        return
    payload = {
        "mode": MODE,
        "wall_s": round(time.monotonic() - _STARTED, 1),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "exitstatus": int(exitstatus),
        "tests": _RESULTS,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
