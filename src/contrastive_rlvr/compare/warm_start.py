"""``compare``'s SFT warm-start cache: what the embedded warm start of a seed depends on
(its key), and ``OUT/sft-cache/seed<k>/sft-model``, built once per seed (rebuilt when its
key changed) and copied into every run of that seed."""

from __future__ import annotations

import contextlib
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..run_files import read_json, write_file
from .launch import _launch, _record_failure
from .spec import BUSY_NOTE, BUSY_PREFIX, CompareSpec, FolderBusy, _config_args

SFT_CACHE = "sft-cache"
SFT_KEY_FILE = "key.json"


def _sft_key(spec: CompareSpec, seed: int) -> dict:
    """What the embedded warm start depends on: the seed, the task length, the SFT steps and
    the share of reading demonstrations (and, when that share is > 0, the reading
    demonstrations' settings)."""
    from ..trainer.parse import parse_config

    cfg = parse_config(spec.config, [*spec.overrides, "--seed", str(seed)])
    return {
        "model": cfg.model,
        "seed": seed,
        "embedded_terms": cfg.embedded_terms,
        **({"embedded_hidden_ops": True} if cfg.embedded_hidden_ops else {}),
        "embedded_sft_steps": cfg.embedded_sft_steps,
        "embedded_sft_context_frac": cfg.embedded_sft_context_frac,
        **({"embedded_bicc_phrases": True} if cfg.embedded_bicc_phrases else {}),
        **(_reading_key(cfg) if cfg.embedded_sft_context_frac > 0 else {}),
    }


def _reading_key(cfg) -> dict:
    """What a reading warm start also depends on: its target rule and the BiCC context
    its demonstrations are cut to."""
    from ..run.embedded_inputs import sft_context_budget

    return {
        "embedded_sft_context_target": cfg.embedded_sft_context_target,
        "embedded_sft_context_attempts": cfg.embedded_sft_context_attempts,
        "max_completion_length": cfg.max_completion_length,
        "temperature": cfg.temperature,
        "context_budget": sft_context_budget(cfg) if cfg.model == "embedded" else None,
        "bicc_truncation": cfg.bicc_truncation,
        "bicc_placement": cfg.bicc_placement,
        "context_max_attempts": max(cfg.num_generations - 1, 1),
    }


def sft_cache_dir(spec: CompareSpec, seed: int) -> Path:
    return Path(spec.output_dir) / SFT_CACHE / f"seed{seed}"


def build_sft_cache(spec: CompareSpec, seed: int) -> str | None:
    """Build ``OUT/sft-cache/seed<k>/sft-model`` (rebuilt when its key changed);
    returns an error message or None."""
    from ..run.folder import SFT_DIR
    from ..run.folder_lock import held_by_a_live_process

    key = _sft_key(spec, seed)
    if key["model"] != "embedded":
        return None
    cache = sft_cache_dir(spec, seed)
    if held_by_a_live_process(cache):
        raise FolderBusy(cache)
    key_file = cache / SFT_KEY_FILE
    if (cache / SFT_DIR / "config.json").exists() and key_file.exists():
        with contextlib.suppress(ValueError):  # a key that does not parse: build again
            if read_json(key_file) == key:
                return None
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    argv = ["warm-start", str(cache), *_config_args(spec), *spec.overrides, "--seed", str(seed)]
    code = _launch(argv, cache / "warm-start.log", in_process=spec.jobs == 1)
    if code != 0 or not (cache / SFT_DIR / "config.json").exists():
        return _record_failure(
            cache, f"SFT warm start of seed {seed}", code, cache / "warm-start.log"
        )
    write_file(cache, SFT_KEY_FILE, json.dumps(key) + "\n")
    return None


def _sft_caches(spec: CompareSpec, seeds: list[int], echo) -> dict[int, str]:
    """Build the warm starts (in this thread for jobs=1); seed -> error message."""

    def build(seed: int) -> str | None:
        try:
            return build_sft_cache(spec, seed)
        except FolderBusy as busy:
            return f"{BUSY_PREFIX}the SFT warm start {busy.folder}: {BUSY_NOTE}"
        except OSError as err:
            return f"SFT warm start of seed {seed} could not start: {err}"

    if spec.jobs == 1:
        results = [build(k) for k in seeds]
    else:
        with ThreadPoolExecutor(max_workers=spec.jobs) as pool:
            results = list(pool.map(build, seeds))
    errors = {}
    for seed, err in zip(seeds, results, strict=True):
        if err is not None:
            errors[seed] = err
            if err.startswith(BUSY_PREFIX):
                echo(f"BUSY warm start of seed {seed}: {err[len(BUSY_PREFIX) :]}")
            else:
                echo(f"FAILED warm start of seed {seed}: see {sft_cache_dir(spec, seed)}/error.txt")
    return errors
