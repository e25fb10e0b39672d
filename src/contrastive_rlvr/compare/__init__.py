"""``contrastive-rlvr compare``: recipes x {plain, BiCC, RCC, BiCC+RCC} x seeds, and the table.

Every run is what ``contrastive-rlvr train`` runs, its output in
``OUT/<recipe>/<arm>/seed<k>``:

- every run reads ``OUT/base-config.yaml``, a copy of the config YAML made when
  ``compare`` starts (edits of the original during a matrix change no run);
- a run whose ``summary.json`` exists (and records no ``error``) is not run again; one
  whose summary records an error is a failed run;
- each run is keyed on its resolved config less where it writes and how it logs,
  saves and resumes (:func:`.spec.run_settings`): a folder whose ``config.yaml`` was made
  with other settings is refused before any run starts when it holds a result or a
  checkpoint (use another OUT or remove it), and replaced when it holds only a failed
  or unstarted attempt; a field the folder's config predates counts as its default
  (an older version's runs are reused while the new option stays at its default);
  ``results.json`` records each run's key (``config_sha256``) and config file;
- one compare per OUT: a second one is refused before it writes anything (a lock on
  the folder, gone with its holder however it ends); a run or warm-start folder that a
  live process holds (a run this compare did not start) is left alone, its files never
  opened, and reported as ``busy``;
- a failed run leaves ``error.txt`` (exit code and the end of its log) and the
  others go on; ``train.log`` holds each run's output;
- with the embedded default, the SFT warm start of each seed is built once in
  ``OUT/sft-cache/seed<k>/sft-model`` and copied into every run of that seed
  (``train`` reuses ``output_dir/sft-model`` when present);
- ``jobs=1`` (the default) runs everything in this process and its main thread,
  one run after another (imports paid once); ``jobs > 1`` runs that many child
  processes (``python -m contrastive_rlvr.compare train ...``) at once, one torch
  thread each, each the leader of its own process group and ending with this
  process however it ends (Linux: the parent-death signal, :mod:`.child_processes`),
  so that a compare killed with SIGKILL leaves no run going on;
- Ctrl-C stops the matrix at once: the running run(s) stop (child processes get
  SIGINT, then SIGKILL after ``STOP_GRACE_S``), are marked ``interrupted`` in
  ``results.json`` (and ``interrupted.txt`` in their folder), and no other run
  starts. Running ``compare`` again resumes: a run with a complete checkpoint
  continues from it, one without starts again in its folder;
- a failure before a run starts (its folder cannot be made, the warm start cannot
  be copied) is recorded as that run's failure, like a failure during it.

Then ``OUT/results.md`` (the BiCC paper's Table 2 layout: one row per arm,
held-out avg@n after RL with its 95% Student t interval over seeds, the
paired difference to the plain arm of the same recipe, the SFT start) and
``OUT/results.json`` (the same numbers and the per-seed values).

The package: :mod:`.spec` (CompareSpec, planning the runs, their keys), :mod:`.launch`
(the process launcher and its children), :mod:`.warm_start` (the SFT warm-start cache),
:mod:`.matrix` (running the matrix), :mod:`.tables` (results.json and results.md).
"""

from __future__ import annotations

from .launch import child_main
from .matrix import run_compare
from .spec import (
    ARM_SUFFIX,
    ARMS,
    CompareSpec,
    RunResult,
    RunSpec,
    make_spec,
    plan_runs,
    recipe_label,
    registered_recipes,
)
from .tables import CI_LEVEL, ONE_SEED_NOTE, build_results, grad_var_summary, results_markdown
from .warm_start import _sft_key

__all__ = [
    "ARMS",
    "ARM_SUFFIX",
    "CI_LEVEL",
    "ONE_SEED_NOTE",
    "CompareSpec",
    "RunResult",
    "RunSpec",
    "_sft_key",
    "build_results",
    "child_main",
    "grad_var_summary",
    "make_spec",
    "plan_runs",
    "recipe_label",
    "registered_recipes",
    "results_markdown",
    "run_compare",
]
