"""Run TRL's GRPO tests offline against stock ``GRPOTrainer`` and ``RLVRTrainer``; compare.

    python benchmarks/trl_parity/run.py [--mode both|stock|rlvr] [-k EXPR] [--out DIR]
                                        [--parallel] [--timeout S] [--git-dir DIR] [--rev REV]

(``make trl-parity`` runs it with the defaults.) Extracts the TRL test files into
``.trl-suite/`` when they are missing (see ``extract.py``), then runs pytest once per mode
with the ``trl_parity.plugin`` plugin (1 torch thread, ``-p no:cacheprovider``, no ``-x``).
Writes into ``--out`` (default ``runs/trl-parity``): ``<mode>.json`` (every test's outcome
and first failure line), ``<mode>.log`` (pytest's output), ``comparison.json`` and
``report.md`` (counts per mode and every test whose outcome differs). The report is also
printed. The exit status is 0 whenever both runs completed, whatever the tests did.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))

from trl_parity import extract, tiny_hub  # noqa: E402

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
TEST_FILE = "tests/test_grpo_trainer.py"


def run_mode(
    mode: str, suite: Path, out: Path, keyword: str | None, timeout: int, python: str
) -> subprocess.Popen:
    """Start pytest for ``mode``; its outcomes go to ``out/<mode>.json``."""
    env = dict(os.environ)
    env.update(
        {
            # .trl-suite/site: the optional test extras of requirements.txt (peft, jmespath).
            "PYTHONPATH": os.pathsep.join(
                [
                    str(REPO_ROOT / "src"),
                    str(HERE.parent),
                    str(suite / "site"),
                    env.get("PYTHONPATH", ""),
                ]
            ).rstrip(os.pathsep),
            "TRL_PARITY_MODE": mode,
            "TRL_PARITY_RESULTS": str(out / f"{mode}.json"),
            "TRL_PARITY_TIMEOUT": str(timeout),
            "HF_HUB_CACHE": str(suite / "hub"),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "WANDB_MODE": "disabled",
        }
    )
    cmd = [
        python,
        "-m",
        "pytest",
        "-c",
        "pytest.ini",
        "-p",
        "no:cacheprovider",
        "-p",
        "trl_parity.plugin",
        "-q",
        "-rN",
        "-W",
        "ignore::FutureWarning",
        TEST_FILE,
    ]
    if keyword:
        cmd += ["-k", keyword]
    (out / f"{mode}.json").unlink(missing_ok=True)  # never read a previous run's results
    log = open(out / f"{mode}.log", "w")
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    return subprocess.Popen(cmd, cwd=suite, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wall_from_log(log: Path) -> float:
    """pytest's own "in 123.45s" from its summary line (results written without wall_s)."""
    found = re.findall(r" in ([0-9.]+)s", log.read_text()) if log.exists() else []
    return float(found[-1]) if found else float("nan")


def _kind(message: str) -> str:
    """A failure's kind (its exception type, or ``assert``), to compare the two modes."""
    found = re.match(r"[\w.]+", message.strip())
    return found.group(0) if found else ""


def counts(results: dict) -> dict[str, int]:
    c = Counter(v["outcome"] for v in results["tests"].values())
    return {k: c.get(k, 0) for k in OUTCOMES} | {"total": sum(c.values())}


def compare(stock: dict, rlvr: dict) -> list[dict]:
    """Every test whose outcome differs between the two modes (sorted by test id)."""
    diffs = []
    for nodeid in sorted(set(stock["tests"]) | set(rlvr["tests"])):
        a = stock["tests"].get(nodeid, {"outcome": "absent", "message": ""})
        b = rlvr["tests"].get(nodeid, {"outcome": "absent", "message": ""})
        if a["outcome"] != b["outcome"]:
            diffs.append(
                {
                    "test": nodeid.split("::", 1)[-1],
                    "stock": a["outcome"],
                    "rlvr": b["outcome"],
                    "stock_message": a["message"],
                    "rlvr_message": b["message"],
                }
            )
    return diffs


def skip_reasons(results: dict) -> Counter:
    return Counter(v["message"] for v in results["tests"].values() if v["outcome"] == "skipped")


def report(
    source: dict, runs: dict[str, dict], walls: dict[str, float], keyword: str | None, command: str
) -> tuple[str, dict]:
    lines = [
        "# TRL GRPO test suite: stock GRPOTrainer vs RLVRTrainer (recipe grpo, additions off)",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}",
        f"- command: `{command}`",
        f"- TRL tests: {source['commit'][:12]} ({source['commit_date']}, VERSION "
        f"{source['snapshot_version']}); installed trl {source['installed_trl']}"
        + ("" if source["exact_version_match"] else " (no snapshot commit at that version)"),
        f"- filter: -k {keyword!r}" if keyword else "- filter: none (whole file)",
        "",
        "| mode | " + " | ".join(OUTCOMES) + " | total | wall s |",
        "|---" * (len(OUTCOMES) + 3) + "|",
    ]
    summary: dict = {"source": source, "keyword": keyword, "command": command, "modes": {}}
    for mode, res in runs.items():
        c = counts(res)
        summary["modes"][mode] = {
            "counts": c,
            "wall_s": round(walls[mode], 1),
            "exitstatus": res["exitstatus"],
        }
        lines.append(
            f"| {mode} | "
            + " | ".join(str(c[k]) for k in OUTCOMES)
            + f" | {c['total']} | {walls[mode]:.0f} |"
        )
    if "stock" in runs and "rlvr" in runs:
        diffs = compare(runs["stock"], runs["rlvr"])
        summary["differences"] = diffs
        lines += ["", f"## Tests whose outcome differs ({len(diffs)})", ""]
        if not diffs:
            lines.append("none")
        for d in diffs:
            msg = d["rlvr_message"] if d["rlvr"] in ("failed", "error") else d["stock_message"]
            lines.append(
                f"- `{d['test']}`: stock {d['stock']}, rlvr {d['rlvr']}: {msg.strip()[:300]}"
            )
        # Failing in both modes, but not for the same reason: a difference the counts hide.
        both = [
            (k.split("::", 1)[-1], runs["stock"]["tests"][k], runs["rlvr"]["tests"][k])
            for k in sorted(set(runs["stock"]["tests"]) & set(runs["rlvr"]["tests"]))
            if runs["stock"]["tests"][k]["outcome"] in ("failed", "error")
            and runs["rlvr"]["tests"][k]["outcome"] in ("failed", "error")
            and _kind(runs["stock"]["tests"][k]["message"])
            != _kind(runs["rlvr"]["tests"][k]["message"])
        ]
        summary["failing_both_differently"] = [
            {"test": t, "stock_message": a["message"], "rlvr_message": b["message"]}
            for t, a, b in both
        ]
        lines += ["", f"## Failing in both modes, with different errors ({len(both)})", ""]
        lines += [
            f"- `{t}`: stock: {a['message'].strip()[:160]}; rlvr: {b['message'].strip()[:200]}"
            for t, a, b in both
        ] or ["none"]
    first = next(iter(runs.values()))
    reasons = skip_reasons(first)
    if reasons:
        lines += ["", f"## Skipped (in the {first['mode']} run), by reason", ""]
        lines += [f"- {n} x {reason[:200]}" for reason, n in reasons.most_common()]
    for mode, res in runs.items():
        bad = {k: v for k, v in res["tests"].items() if v["outcome"] in ("failed", "error")}
        lines += ["", f"## Failing in the {mode} run ({len(bad)})", ""]
        lines += [
            f"- `{k.split('::', 1)[-1]}`: {v['message'].strip()[:300]}"
            for k, v in sorted(bad.items())
        ] or ["none"]
    return "\n".join(lines) + "\n", summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("both", "stock", "rlvr"), default="both")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k filter (a subset)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "runs" / "trl-parity")
    parser.add_argument(
        "--suite",
        type=Path,
        default=extract.DEFAULT_DEST,
        help="folder holding the extracted TRL tests",
    )
    parser.add_argument("--git-dir", type=Path, default=extract.DEFAULT_GIT_DIR)
    parser.add_argument(
        "--rev", default=None, help="TRL revision to extract (default: see extract.py)"
    )
    parser.add_argument("--re-extract", action="store_true", help="extract again even if present")
    parser.add_argument("--parallel", action="store_true", help="run both modes at once")
    parser.add_argument("--timeout", type=int, default=600, help="per-test limit, seconds")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument(
        "--real-vocab",
        action="store_true",
        help="Qwen/Llama stand-ins with the real 151k/128k vocabularies (slow on CPU)",
    )
    parser.add_argument(
        "--compare-only",
        action="store_true",
        help="run nothing: rebuild the report from stock.json and rlvr.json already in --out",
    )
    args = parser.parse_args(argv)

    if args.real_vocab:
        os.environ["TRL_PARITY_REAL_VOCAB"] = "1"  # read by tiny_hub, here and in pytest
        tiny_hub.REAL_VOCAB = True
    suite = args.suite.resolve()
    if args.re_extract or args.rev or not (suite / TEST_FILE).exists():
        extract.extract(args.git_dir, suite, args.rev)
    source = json.loads((suite / "SOURCE.json").read_text())
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    modes = ["stock", "rlvr"] if args.mode == "both" else [args.mode]
    command = "python benchmarks/trl_parity/run.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    walls: dict[str, float] = {}
    runs: dict[str, dict] = {}
    if args.compare_only:
        for m in modes:
            runs[m] = json.loads((out / f"{m}.json").read_text())
            walls[m] = runs[m].get("wall_s") or _wall_from_log(out / f"{m}.log")
        modes = []
    else:
        # Build the stand-in models once, before any pytest process starts.
        tiny_hub.ensure_hub_cache(suite / "hub", log=lambda m: print(m, file=sys.stderr))
    batches = [modes] if args.parallel else [[m] for m in modes]
    for batch in batches:
        started = {
            m: (time.monotonic(), run_mode(m, suite, out, args.keyword, args.timeout, args.python))
            for m in batch
        }
        for m, (t0, proc) in started.items():
            print(f"trl-parity: running {m} (log: {out / f'{m}.log'})", file=sys.stderr)
            rc = proc.wait()
            walls[m] = time.monotonic() - t0
            path = out / f"{m}.json"
            if not path.exists():
                print(
                    f"trl-parity: the {m} run wrote no results (pytest exit {rc}); see "
                    f"{out / f'{m}.log'}",
                    file=sys.stderr,
                )
                return 2
            runs[m] = json.loads(path.read_text())
            walls[m] = runs[m].get("wall_s") or walls[m]  # the run's own, not the wait's
            print(f"trl-parity: {m} done in {walls[m]:.0f} s: {counts(runs[m])}", file=sys.stderr)
    text, summary = report(source, runs, walls, args.keyword, command.strip())
    (out / "report.md").write_text(text)
    (out / "comparison.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
