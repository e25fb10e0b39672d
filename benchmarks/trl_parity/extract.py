"""Extract TRL's GRPO test file and the helpers it imports from a TRL git snapshot.

The copy goes to ``.trl-suite/tests/`` (gitignored): TRL's code is never committed here.
The revision is the newest commit whose ``VERSION`` file equals the installed ``trl``
version when the snapshot has one, else the snapshot's ``HEAD`` (with a warning): TRL's
``tests/`` are not shipped in its wheel or sdist, so the snapshot is the only source.

    python benchmarks/trl_parity/extract.py [--git-dir DIR] [--rev REV] [--dest DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_GIT_DIR = Path("/work/.mirror/huggingface+trl/repo")
DEFAULT_DEST = REPO_ROOT / ".trl-suite"
# The test module and everything it imports from the tests package.
FILES = (
    "tests/__init__.py",
    "tests/conftest.py",
    "tests/testing_constants.py",
    "tests/testing_utils.py",
    "tests/test_grpo_trainer.py",
)
# TRL's pytest markers, so the copied tests collect without unknown-marker warnings.
PYTEST_INI = """\
# Written by benchmarks/trl_parity/extract.py: isolates TRL's tests from this project's
# pytest configuration (rootdir, testpaths, markers).
[pytest]
markers =
    slow: TRL slow tests
    low_priority: TRL low-priority tests
filterwarnings =
    ignore::DeprecationWarning
"""


def _git(git_dir: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True
    )
    return out.stdout


def find_revision(git_dir: Path, wanted: str) -> tuple[str, str, bool]:
    """``(commit, VERSION at that commit, exact)`` for the installed TRL version ``wanted``.

    Walks first-parent history of HEAD (newest first) and returns the newest commit whose
    ``VERSION`` equals ``wanted``; when none does, returns HEAD with ``exact=False``.
    """
    head = _git(git_dir, "rev-parse", "HEAD").strip()
    # Commits that touched VERSION, newest first: the version changes only there.
    commits = _git(git_dir, "log", "--first-parent", "--format=%H", "HEAD", "--", "VERSION")
    for commit in commits.split():
        try:
            ver = _git(git_dir, "show", f"{commit}:VERSION").strip()
        except subprocess.CalledProcessError:
            continue
        if ver == wanted:
            return commit, ver, True
    return head, _git(git_dir, "show", "HEAD:VERSION").strip(), False


def extract(git_dir: Path, dest: Path, rev: str | None = None) -> dict:
    """Write FILES at ``rev`` (default: see :func:`find_revision`) under ``dest``."""
    if not (git_dir / "HEAD").exists():
        raise SystemExit(
            f"--git-dir {git_dir} is not a git directory: fetch a TRL snapshot first "
            "(e.g. the fetch tool with source github:huggingface/trl)"
        )
    installed = version("trl")
    if rev is None:
        commit, snapshot_version, exact = find_revision(git_dir, installed)
    else:
        commit = _git(git_dir, "rev-parse", rev).strip()
        snapshot_version = _git(git_dir, "show", f"{commit}:VERSION").strip()
        exact = snapshot_version == installed
    if not exact:
        print(
            f"warning: the snapshot has no commit at trl {installed}; using {commit[:10]} "
            f"(VERSION {snapshot_version}), the newest available",
            file=sys.stderr,
        )
    for name in FILES:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_git(git_dir, "show", f"{commit}:{name}"))
    (dest / "pytest.ini").write_text(PYTEST_INI)
    info = {
        "git_dir": str(git_dir),
        "commit": commit,
        "commit_date": _git(git_dir, "log", "-1", "--format=%cI", commit).strip(),
        "snapshot_version": snapshot_version,
        "installed_trl": installed,
        "exact_version_match": exact,
        "files": list(FILES),
    }
    (dest / "SOURCE.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git-dir", type=Path, default=DEFAULT_GIT_DIR)
    parser.add_argument("--rev", default=None, help="commit or tag (default: see module doc)")
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    args = parser.parse_args(argv)
    info = extract(args.git_dir, args.dest, args.rev)
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
