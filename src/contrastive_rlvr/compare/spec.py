"""What ``compare`` runs: the arms, :class:`CompareSpec` (from YAML and flags), the planned
runs (:class:`RunSpec`, each keyed on its resolved settings and checked against what its
folder already holds), and what a run ends as (:class:`RunResult`; a busy folder)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..run_files import read_json, read_text

#: arm name -> (bicc, rcc)
ARMS: dict[str, tuple[bool, bool]] = {
    "plain": (False, False),
    "bicc": (True, False),
    "rcc": (False, True),
    "bicc+rcc": (True, True),
}


def recipe_label(name: str) -> str:
    """The label tables and figures print for recipe ``name`` (the recipe table's)."""
    from ..algorithms.registry import RECIPES  # torch: imported when a table is made

    return RECIPES[name].display_label if name in RECIPES else name


def registered_recipes() -> list[str]:
    from ..algorithms.registry import RECIPES

    return list(RECIPES)


ARM_SUFFIX = {"plain": "", "bicc": " + BiCC", "rcc": " + RCC", "bicc+rcc": " + BiCC + RCC"}
#: Set per run by the matrix; an override of these in ``overrides`` is refused.
MATRIX_FIELDS = ("recipe", "bicc", "rcc", "seed", "output_dir")


@dataclass
class CompareSpec:
    """What ``compare`` runs (every field settable from a YAML file and from flags).

    Attributes:
        recipes: recipe names (rows are grouped by recipe).
        arms: any of ``plain``, ``bicc``, ``rcc``, ``bicc+rcc``.
        seeds: run seeds (also the seed of the SFT warm start and of the evaluation).
        config: RLVRConfig YAML applied to every run (None: the shipped base ``train``
            takes for the ``--model`` of ``overrides``: embedded.yaml for the embedded
            model or none named, paper.yaml for any other).
        overrides: ``--field value`` RLVRConfig overrides applied to every run.
        output_dir: OUT.
        jobs: runs at once.
    """

    recipes: list[str] = field(default_factory=registered_recipes)
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    config: str | None = None
    overrides: list[str] = field(default_factory=list)
    output_dir: str = "runs/compare"
    jobs: int = 1

    def __post_init__(self) -> None:
        from ..algorithms import RECIPES

        for name in self.recipes:
            if name not in RECIPES:
                raise ValueError(f"recipes: unknown recipe {name!r}; valid: {', '.join(RECIPES)}")
        for arm in self.arms:
            if arm not in ARMS:
                raise ValueError(f"arms: unknown arm {arm!r}; valid: {', '.join(ARMS)}")
        for name, values in (("recipes", self.recipes), ("arms", self.arms), ("seeds", self.seeds)):
            if not values:
                raise ValueError(f"{name}: give at least one")
            if len(set(values)) != len(values):
                raise ValueError(f"{name}: duplicates in {values}")
        if self.jobs < 1:
            raise ValueError(f"jobs={self.jobs} is invalid: must be >= 1")
        bad = [s for s in self.seeds if not 0 <= s < 2**32]
        if bad:  # refused before any run starts, not by the first run's config
            raise ValueError(f"seeds: {bad[0]} is invalid: a seed must be in 0..2**32-1")
        for item in self.overrides:
            if item.startswith("--") and item[2:].split("=")[0].replace("-", "_") in MATRIX_FIELDS:
                raise ValueError(
                    f"overrides: {item} is set by the matrix for each run; use the recipes, "
                    "arms, seeds and output_dir options instead"
                )


def load_compare_yaml(path: str | Path) -> dict:
    """The CompareSpec fields in a YAML file. ``overrides`` may be a mapping
    ``field: value`` or a list of ``--field value`` strings."""
    from ..trainer.parse import load_yaml

    # overrides may be a mapping (converted below), which the list[str] field type would refuse
    data = load_yaml(
        path, CompareSpec, what="compare file", checked_by_caller=frozenset({"overrides"})
    )
    overrides = data.get("overrides")
    if isinstance(overrides, dict):
        data["overrides"] = [s for k, v in overrides.items() for s in (f"--{k}", _flag(v))]
    elif overrides is not None and not isinstance(overrides, list):
        raise ValueError(f"compare file {path}: overrides must be a mapping or a list")
    return data


def make_spec(spec_file: str | Path | None = None, **flags: object) -> CompareSpec:
    """CompareSpec from the defaults, then the YAML file, then the flags that are not None.

    ``recipes``, ``arms`` and ``seeds`` flags may be comma-separated strings;
    ``overrides`` from the flags are appended to those of the file.
    """
    values = load_compare_yaml(spec_file) if spec_file else {}
    for name in ("recipes", "arms", "seeds"):
        flag = flags.pop(name, None)
        if flag is not None:
            values[name] = [x.strip() for x in str(flag).split(",") if x.strip()]
    try:
        values["seeds"] = [int(k) for k in values.get("seeds", [0, 1, 2])]
    except ValueError as err:
        raise ValueError(f"seeds: integers expected, got {values.get('seeds')}") from err
    extra = flags.pop("overrides", None) or []
    values["overrides"] = [str(x) for x in values.get("overrides", [])] + list(extra)
    values.update(
        {k: (str(v) if isinstance(v, Path) else v) for k, v in flags.items() if v is not None}
    )
    return CompareSpec(**values)


def _flag(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class RunSpec:
    """One cell of the matrix; ``config_sha256`` is the key of its resolved settings
    (:func:`run_settings`, seed left out so that the seeds of one row share it)."""

    recipe: str
    arm: str
    seed: int
    output_dir: Path
    config_sha256: str = field(default="", compare=False)
    #: BiCC's form in this run's words (``run.summary.bicc_form_words``), "" with BiCC off.
    bicc: str = field(default="", compare=False)

    def overrides(self, spec: CompareSpec) -> list[str]:
        """RLVRConfig overrides of this run: the shared ones, then this cell's."""
        bicc, rcc = ARMS[self.arm]
        return [
            *spec.overrides,
            *("--recipe", self.recipe, "--bicc", _flag(bicc), "--rcc", _flag(rcc)),
            *("--seed", str(self.seed), "--output_dir", str(self.output_dir)),
        ]


#: Resolved fields that do not change a run's result: where it writes, how it resumes,
#: how it shows progress, how often it logs and saves (and, from :func:`unkeyed_fields`,
#: every other field a resume may change, the held-out evaluation's excepted). Every
#: other field is part of a run's key.
UNKEYED_FIELDS = frozenset(
    {
        "output_dir", "logging_dir", "run_name", "base_config", "resume",
        "resume_from_checkpoint", "overwrite_output_dir", "resume_allow_config_change",
        "disable_tqdm", "torch_threads", "report_to", "log_level", "log_level_replica",
    }
)  # fmt: skip
#: Fields a resume may change that still change compare's table: the held-out evaluation.
TABLE_FIELDS = frozenset({"eval_n", "eval_limit"})


def unkeyed_fields() -> frozenset[str]:
    """:data:`UNKEYED_FIELDS` and the fields that do not change what is trained
    (``trainer.config_compare.NON_TRAINING_FIELDS``: logging and saving intervals, Hub
    uploads, data-loader workers), less :data:`TABLE_FIELDS`."""
    from ..run.config_compare import NON_TRAINING_FIELDS

    return UNKEYED_FIELDS | (NON_TRAINING_FIELDS - TABLE_FIELDS)


def run_settings(config_fields: dict) -> dict:
    """The settings a run's result depends on: its resolved config less
    :func:`unkeyed_fields` and the options of a method that is off, normalised through
    YAML as ``config.yaml`` is written."""
    import yaml

    from ..run.config_compare import without_inactive_options

    unkeyed = unkeyed_fields()
    active = without_inactive_options(config_fields)
    kept = {k: v for k, v in active.items() if k not in unkeyed}
    return yaml.safe_load(yaml.safe_dump(kept, sort_keys=True)) or {}


def _settings_sha(settings: dict) -> str:
    import hashlib

    without_seed = {k: v for k, v in settings.items() if k != "seed"}
    text = json.dumps(without_seed, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def plan_runs(spec: CompareSpec, config_text: str | None = None) -> list[RunSpec]:
    """The runs in order (recipe, arm, seed); every config is built (so validated, ranges
    included) before any runs, and checked against what its folder already holds: its
    settings and the content of its dataset file. ``config_text``: the text of
    ``spec.config`` read once by the caller (a pipe cannot be read twice)."""
    from ..trainer.parse import parse_config

    out = Path(spec.output_dir)
    runs, clashes = [], []
    from ..run.identity import identity_of
    from ..run.summary import bicc_form_words

    data_identity: dict[str, dict | None] = {}  # dataset -> its fingerprint, hashed once
    identities: dict[tuple, dict] = {}
    for recipe in spec.recipes:
        for arm in spec.arms:
            for seed in spec.seeds:
                run = RunSpec(recipe, arm, seed, out / recipe / arm / f"seed{seed}")
                try:
                    cfg = parse_config(spec.config, run.overrides(spec), text=config_text)
                except (ValueError, SystemExit) as err:
                    raise ValueError(f"run {recipe}/{arm}/seed{seed}: {err}") from err
                if cfg.heldout_size == 0 and cfg.model != "embedded":
                    raise ValueError(
                        "heldout_size=0 turns the held-out scoring off, and compare's table "
                        "is the held-out avg@n: give heldout_size above 0"
                    )
                settings = run_settings(cfg.to_dict())
                if cfg.dataset not in data_identity:
                    data_identity[cfg.dataset] = _data_fingerprint(cfg.dataset)
                data = data_identity[cfg.dataset]
                key = (tuple(cfg.rewards or ()), cfg.dataset, cfg.model)
                if key not in identities:  # reward code, dataset folder, model files
                    identities[key] = identity_of(cfg)
                clash = _folder_clash(run.output_dir, settings, data, identities[key])
                if clash:
                    clashes.append(f"{recipe}/{arm}/seed{seed} ({clash})")
                # The data's content is part of the key: results.json tells its versions apart.
                keyed = {**settings, "data_sha256": data and data.get("sha256")}
                bicc = bicc_form_words(cfg) if cfg.bicc else ""
                runs.append(dataclasses.replace(run, config_sha256=_settings_sha(keyed), bicc=bicc))
    if clashes:
        raise ValueError(
            f"{len(clashes)} run folder(s) of {out} hold a run made on other data or other "
            f"settings: {'; '.join(clashes[:3])}{' ...' if len(clashes) > 3 else ''}; old and new "
            "runs are never mixed in one table: choose another --out, or remove those folders"
        )
    return runs


def _data_fingerprint(dataset: str | None) -> dict | None:
    """The content fingerprint of a local dataset file (None: the embedded task, or a
    Hub name, whose content a run records from the loaded table)."""
    from ..data import file_fingerprint

    if not dataset or not Path(dataset).is_file():
        return None
    return file_fingerprint(dataset)


def _data_clash(run_dir: Path, data: dict | None, identity: dict | None = None) -> str | None:
    """How the dataset file, or the run's other inputs (``identity``: reward code, dataset
    folder, model files), differ from what the run in ``run_dir`` recorded."""
    from ..data import fingerprint_differences
    from ..run.folder import DATA_FILE
    from ..run.identity import identity_differences

    record = run_dir / DATA_FILE
    if not record.is_file():
        return None  # nothing to compare: a run made before data.json, or the embedded task
    try:
        saved = read_json(record)
    except ValueError as err:  # run_files: not JSON, not a regular file, too large
        return str(err)
    saved = saved if isinstance(saved, dict) else {}
    change = None if data is None else fingerprint_differences(saved, data)
    if change is not None:
        return f"dataset {saved.get('path')} changed: {change}"
    return None if identity is None else identity_differences(saved.get("identity"), identity)


def _folder_clash(
    run_dir: Path, settings: dict, data: dict | None = None, identity: dict | None = None
) -> str | None:
    """The differing fields when ``run_dir`` holds a result or a checkpoint made with
    other settings than ``settings`` or on other data than ``data`` (the dataset file's
    fingerprint now); None: it holds none, or one made with these."""
    import yaml

    from ..checkpoints import newest_complete_checkpoint
    from ..run.config_compare import predates
    from ..run.folder import CONFIG_FILE
    from ..trainer.parse import YAMLTooLarge, safe_yaml

    saved_file = run_dir / CONFIG_FILE
    if not saved_file.is_file():
        return None
    if finished_summary(run_dir) is None and newest_complete_checkpoint(run_dir)[0] is None:
        return None  # a failed or unstarted attempt: rerun in its place
    data_change = _data_clash(run_dir, data, identity)
    if data_change:
        return data_change
    try:
        saved = run_settings(safe_yaml(read_text(saved_file)) or {})
    except (yaml.YAMLError, YAMLTooLarge, ValueError) as err:
        return f"{saved_file} does not parse ({' '.join(str(err).split())[:100]})"
    missing = object()
    # A field the folder's run predates is no difference while it is at its default.
    diffs = [
        f"{k}: {saved.get(k, '(unset)')!r} there, {settings.get(k, '(unset)')!r} now"
        for k in sorted(set(saved) | set(settings))
        if saved.get(k, missing) != settings.get(k, missing)
        and not predates(saved, k, settings.get(k, missing))
    ]
    return ", ".join(diffs[:3]) + (" ..." if len(diffs) > 3 else "") if diffs else None


def finished_summary(run_dir: Path) -> dict | None:
    """The summary of a run that finished without error (None: unfinished, unreadable, or
    a summary that records an ``error``: a failed run)."""
    from ..run.folder import SUMMARY_FILE

    try:
        summary = read_json(run_dir / SUMMARY_FILE)
    except (OSError, ValueError):  # absent, or not a whole regular JSON file
        return None
    if not isinstance(summary, dict) or "error" in summary:
        return None
    return summary


def _config_args(spec: CompareSpec) -> list[str]:
    return ["--config", spec.config] if spec.config else []


# ---------------------------------------------------------------------- what a run ends as


@dataclass
class RunResult:
    run: RunSpec
    # "done", "skipped" (summary existed), "failed", "interrupted", "pending", "busy" (a
    # live process holds its folder: left alone)
    status: str
    error: str | None = None
    summary: dict | None = None


class FolderBusy(Exception):
    """A live process holds the lock of a folder this compare would write (a run or a warm
    start that this compare did not start): its files are left alone."""

    def __init__(self, folder: Path) -> None:
        super().__init__(str(folder))
        self.folder = folder


BUSY_NOTE = (
    "a live process holds its folder (a run this compare did not start: a train command, "
    "or a child of a compare that was killed); its files were left alone: run compare "
    "again once it has ended"
)


#: Starts the message of a warm start that a live process holds (its runs are busy).
BUSY_PREFIX = "busy: "
