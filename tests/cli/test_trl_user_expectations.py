"""Issue 18, the items left after its first round: --debug after every subcommand,
`train --fields`, the project's INFO lines at --log_level info, local json/jsonl/parquet
through datasets.load_dataset, dotted field paths (DAPO-Math-17k's layout), TRL's default
beta, push_to_hub at the end of a run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from trainer_utils import _tiny_run_args
from typer.testing import CliRunner

from contrastive_rlvr.cli import _STATE, DEBUG_HINT, app

# A command line per subcommand that fails on bad input before any model loads.
FAILING = {
    "train": ["train", "--max_step", "7"],
    "compare": ["compare", "--recipes", "nosuch"],
    "plot": ["plot", "/nonexistent-run-folder"],
    "report": ["report", "/nonexistent-run-folder"],
    "eval": ["eval", "--model", "x", "--limit", "0"],
    "premise": ["premise", "--max_step", "7"],
}


def _commands() -> set[str]:
    return {c.name or c.callback.__name__ for c in app.registered_commands}


def test_every_subcommand_is_covered_below():
    assert _commands() == set(FAILING) | {"recipes"}


@pytest.mark.parametrize("command", sorted(FAILING))
def test_debug_after_every_subcommand_prints_the_traceback(command, monkeypatch):
    monkeypatch.setitem(_STATE, "debug", False)
    plain = CliRunner().invoke(app, FAILING[command])
    assert plain.exit_code == 2, plain.output
    assert "Traceback" not in plain.output
    # the hint names the flag and where it goes
    assert plain.output.strip().endswith(DEBUG_HINT.strip())
    assert "add --debug anywhere on the command line" in plain.output
    after = CliRunner().invoke(app, [*FAILING[command], "--debug"])
    assert after.exit_code == 2, after.output
    assert "Traceback (most recent call last)" in after.output
    assert "No such option" not in after.output
    # and the next command line starts without it again
    again = CliRunner().invoke(app, FAILING[command])
    assert "Traceback" not in again.output


def test_debug_after_recipes_is_accepted():
    result = CliRunner().invoke(app, ["recipes", "--debug"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("grpo ")


# -- item: one default beta (TRL's) ------------------------------------------------------


def test_rlvrconfig_default_beta_is_trls(tmp_path):
    from trl import GRPOConfig

    from contrastive_rlvr.trainer import RLVRConfig
    from contrastive_rlvr.trainer.parse import parse_config

    trl_beta = GRPOConfig(output_dir=str(tmp_path), report_to="none", bf16=False).beta
    assert trl_beta == 0.0
    for recipe in ("grpo", "dr_grpo", "dapo"):
        cfg = RLVRConfig(output_dir=str(tmp_path), report_to="none", recipe=recipe)
        assert cfg.beta == trl_beta, recipe
    # the papers' KL weights on request: DeepSeekMath's 0.04, the BiCC paper's Dr.GRPO 0.01
    yaml_file = tmp_path / "paper-kl.yaml"
    yaml_file.write_text("model: x/y\nbeta: null\n")
    assert parse_config(yaml_file, []).beta == 0.04
    assert parse_config(yaml_file, ["--recipe", "dr_grpo"]).beta == 0.01


# -- item: train --fields, a compact list, not --help -----------------------------------


def _field_line(text: str, name: str) -> str:
    (line,) = [ln for ln in text.splitlines() if ln.split("  ")[0] == name]
    return line


def test_fields_lists_each_field_once_with_type_value_and_help():
    import dataclasses

    from contrastive_rlvr.trainer import RLVRConfig

    runner = CliRunner()
    fields = runner.invoke(app, ["train", "--fields"])  # stdout: warnings go apart
    helps = runner.invoke(app, ["train", "--help"])
    assert fields.exit_code == 0 and helps.exit_code == 0
    assert fields.stdout != helps.stdout
    assert "usage:" not in fields.stdout and "usage:" in helps.stdout
    # one line per settable field (base_config is the parser's), a header per group
    names = {f.name for f in dataclasses.fields(RLVRConfig) if f.init} - {"base_config"}
    listed = [ln.split("  ")[0] for ln in fields.stdout.splitlines() if "  " in ln]
    listed = [n for n in listed if not n.startswith("RLVRConfig fields")]
    assert sorted(listed) == sorted(names)
    assert len(fields.stdout.splitlines()) < len(helps.stdout.splitlines()) / 2
    # name, type, this run's value, the first sentence of the help
    ratio = _field_line(fields.stdout, "bicc_context_ratio")
    assert ratio.startswith("bicc_context_ratio  float  0.4  Share of the sequence given to")
    # a bare train runs embedded.yaml: lr 1e-4 (the code's default is 1e-6), BiCC on
    assert _field_line(fields.stdout, "learning_rate").split("  ")[:3] == [
        "learning_rate", "float", "0.0001"
    ]  # fmt: skip
    assert _field_line(fields.stdout, "bicc").split("  ")[2] == "true"
    assert _field_line(fields.stdout, "answer_format").split("  ")[1] == "auto|gsm8k|plain"


def test_fields_shows_the_values_of_the_given_command_line(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("model: x/y\nbf16: false\nbicc: true\nbicc_context_ratio: 0.25\n")
    out = CliRunner().invoke(app, ["train", "--config", str(base), "--fields"]).output
    assert _field_line(out, "bicc_context_ratio").split("  ")[2] == "0.25"
    assert _field_line(out, "model").split("  ")[2] == "x/y"
    over = ["train", "--config", str(base), "--bicc_context_ratio", "0.3", "--fields"]
    out = CliRunner().invoke(app, over).output
    assert _field_line(out, "bicc_context_ratio").split("  ")[2] == "0.3"


# -- item: the project's INFO lines at --log_level info ---------------------------------

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"

# A hand-built RLVRTrainer (BiCC on, so prompt sharing chooses a form for each model and
# logs it at INFO) with the log_level given as argv[2]; no training step.
TRAINER_SCRIPT = """
import sys
sys.path[:0] = [{tests!r}, {src!r}]
from trainer_utils import make_config, make_trainer, save_tiny_model
from pathlib import Path
tmp = Path(sys.argv[1])
model_dir = save_tiny_model(tmp / "model")
extra = {{"log_level": sys.argv[2]}} if sys.argv[2] != "unset" else {{}}
make_trainer(model_dir, make_config(tmp, bicc=True, **extra))
print("built")
"""


def _run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("TRANSFORMERS_VERBOSITY", None)
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=600
    )


# unset: TRL's default log_level "passive" (transformers' verbosity, warning)
@pytest.mark.parametrize(("log_level", "shown"), [("info", True), ("unset", False)])
def test_project_info_lines_follow_log_level(tmp_path, log_level, shown):
    code = TRAINER_SCRIPT.format(tests=str(TESTS), src=str(SRC))
    result = _run_python(code, str(tmp_path / log_level), log_level)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "built" in result.stdout
    line = "INFO contrastive_rlvr.shared_forward.sharing: prompt sharing (policy): packed forward"
    assert (line in result.stderr) is shown, result.stderr[-2000:]


def test_project_log_handler_levels_and_no_double_lines():
    code = """
import logging
from contrastive_rlvr.logs import follow_log_level
log = logging.getLogger("contrastive_rlvr.shared_forward.probe")
follow_log_level(logging.WARNING)
log.info("hidden-at-warning")
log.warning("shown-at-warning")
follow_log_level(logging.INFO)
follow_log_level(logging.INFO)  # a second trainer: still one handler
log.info("shown-at-info")
logging.basicConfig(format="ROOT %(message)s", level=logging.INFO)
log.info("through-root")
"""
    result = _run_python(code)
    assert result.returncode == 0, result.stderr
    err = result.stderr.splitlines()
    assert "hidden-at-warning" not in result.stderr
    assert err[:2] == [
        "WARNING contrastive_rlvr.shared_forward.probe: shown-at-warning",
        "INFO contrastive_rlvr.shared_forward.probe: shown-at-info",
    ]
    # the application configured logging: its handler prints the line, ours stays silent
    assert err[2:] == ["ROOT through-root"]


def test_project_log_lines_follow_a_redirected_stderr(tmp_path):
    """compare's in-process runs redirect stderr to each run's log and close it after: the
    second run's lines must land in the second log, not fail on the first one's closed file."""
    code = f"""
import contextlib, logging
from pathlib import Path
from contrastive_rlvr.logs import follow_log_level
log = logging.getLogger("contrastive_rlvr.start")
for name in ("run1.log", "run2.log"):
    with open(Path({str(tmp_path)!r}) / name, "w") as f, contextlib.redirect_stderr(f):
        follow_log_level(logging.INFO)
        log.info("line of " + name)
log.info("after both")
"""
    result = _run_python(code)
    assert result.returncode == 0, result.stderr
    for name in ("run1.log", "run2.log"):
        text = (tmp_path / name).read_text()
        assert text == f"INFO contrastive_rlvr.start: line of {name}\n", text
    assert result.stderr == "INFO contrastive_rlvr.start: after both\n", result.stderr


# -- item: push_to_hub at the end of a run ----------------------------------------------


class _FakeHub:
    """transformers' ``hf_api()`` without a network: records each call."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.uploads: list[dict] = []

    def create_repo(self, repo_id, **kwargs):
        from types import SimpleNamespace

        self.created.append(repo_id)
        return SimpleNamespace(repo_id=f"someone/{repo_id}")

    def upload_folder(self, *, folder_path, repo_id, **kwargs):
        import hashlib

        folder = Path(folder_path)
        weights = folder / "model.safetensors"
        card = folder / "README.md"
        self.uploads.append({
            "folder": folder.resolve(), "repo_id": repo_id, "files": sorted(os.listdir(folder)),
            "weights": hashlib.sha256(weights.read_bytes()).hexdigest() if weights.exists() else "",
            "card": card.read_text() if card.exists() else "",
        })  # fmt: skip


def test_push_to_hub_uploads_the_final_model_once_at_the_end(tmp_path, monkeypatch):
    import hashlib

    import transformers.trainer
    from huggingface_hub import HfApi

    from contrastive_rlvr.run import train
    from contrastive_rlvr.trainer.parse import parse_config

    hub = _FakeHub()
    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: hub)
    monkeypatch.setattr(HfApi, "whoami", lambda self, token=None: {"name": "someone"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the start-time check reads it
    args = _tiny_run_args(tmp_path)
    start = hashlib.sha256((tmp_path / "model" / "model.safetensors").read_bytes()).hexdigest()
    config = parse_config(None, [*args, "--push_to_hub", "true", "--hub_token", "hf_x"])
    summary = train(config, progress=False)
    assert summary["steps"] == 1
    out = (tmp_path / "out").resolve()
    assert hub.created == ["out"]  # the repository named after output_dir, as TRL's
    assert len(hub.uploads) == 1, hub.uploads
    (push,) = hub.uploads
    assert push["folder"] == out and push["repo_id"] == "someone/out"
    assert {"model.safetensors", "config.json", "README.md"} <= set(push["files"])
    # what was uploaded is the final model as it lies in output_dir after the run, trained
    final = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    assert push["weights"] == final != start
    assert "model" in push["card"] and str(tmp_path / "model") in push["card"]


def test_offline_push_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    import contrastive_rlvr.run.command as run_module

    def no_model(*args, **kwargs):
        raise AssertionError("the model started loading")

    monkeypatch.setattr(run_module, "load_run_inputs", no_model)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = ["train", *_tiny_run_args(tmp_path), "--push_to_hub", "true"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert errors == [
        "error: push_to_hub=true but HF_HUB_OFFLINE is set, so the run could not upload its "
        "model; unset HF_HUB_OFFLINE, or set push_to_hub=false (the final model is saved in "
        "output_dir either way)"
    ]
    assert not (tmp_path / "out" / "config.yaml").exists()


@pytest.mark.parametrize("flag", ["load_in_4bit", "load_in_8bit"])
def test_quantization_without_bitsandbytes_is_refused_before_the_model_loads(
    tmp_path, monkeypatch, flag
):
    import importlib.util

    import contrastive_rlvr.run.command as run_module

    def no_model(*args, **kwargs):
        raise AssertionError("the model started loading")

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name, *a: None if name == "bitsandbytes" else real_find_spec(name, *a),
    )  # fmt: skip
    monkeypatch.setattr(run_module, "load_run_inputs", no_model)
    result = CliRunner().invoke(app, ["train", *_tiny_run_args(tmp_path), f"--{flag}", "true"])
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert errors == [
        f"error: {flag}=true needs bitsandbytes, which is not installed; pip install "
        f"bitsandbytes (quantized training runs on a CUDA GPU), or set {flag}=false"
    ]
    assert not (tmp_path / "out" / "config.yaml").exists()


def test_load_in_4bit_reaches_from_pretrained_as_trls_quantization_config():
    from contrastive_rlvr.trainer import RLVRConfig
    from contrastive_rlvr.trainer.model_options import model_load_kwargs

    config = RLVRConfig(model="m", dataset="d.jsonl", load_in_4bit=True, dtype="bfloat16",
                        bnb_4bit_quant_type="nf4", use_bnb_nested_quant=True)  # fmt: skip
    q = model_load_kwargs(config)["quantization_config"]
    assert (q.load_in_4bit, q.load_in_8bit) == (True, False)
    assert (q.bnb_4bit_quant_type, q.bnb_4bit_use_double_quant) == ("nf4", True)
    assert str(q.bnb_4bit_compute_dtype) == "torch.bfloat16"
    assert "quantization_config" not in model_load_kwargs(RLVRConfig(model="m", dataset="d.jsonl"))


# -- item: local json / jsonl / parquet / csv through datasets.load_dataset --------------

ROWS = [
    {"question": f"{i}+{i}=", "answer": str(2 * i), "level": i % 2,
     "meta": {"source": f"book-{i}", "page": 10 + i}, "tags": ["add", f"t{i}"]}
    for i in range(3)
]  # fmt: skip


def _write(path: Path, rows: list[dict]) -> Path:
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows, indent=1))
    elif path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:  # csv: flat columns only
        flat = [{k: v for k, v in r.items() if not isinstance(v, dict | list)} for r in rows]
        path.write_text("question,answer,level\n" + "".join(
            f"{r['question']},{r['answer']},{r['level']}\n" for r in flat
        ))  # fmt: skip
    return path


@pytest.fixture
def builders(monkeypatch):
    """The datasets builders load_dataset was called with (the loader must use them)."""
    import datasets

    seen: list[str] = []
    real = datasets.load_dataset

    def spy(path, *args, **kwargs):
        seen.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", spy)
    return seen


@pytest.mark.parametrize(
    ("suffix", "builder"),
    [(".jsonl", "json"), (".json", "json"), (".parquet", "parquet"), (".csv", "csv")],
)
def test_each_local_format_goes_through_load_dataset_with_the_same_rows(
    tmp_path, builders, suffix, builder
):
    from contrastive_rlvr.data import load_prompts

    ds = load_prompts(_write(tmp_path / f"d{suffix}", ROWS)).dataset
    assert builders == [builder]
    assert ds["id"] == ["0", "1", "2"]
    assert ds["prompt"] == ["0+0=", "1+1=", "2+2="] and ds["answer"] == ["0", "2", "4"]
    assert ds["level"] == [0, 1, 0] and ds["question"] == ["0+0=", "1+1=", "2+2="]
    if suffix != ".csv":  # nested and list columns as written
        assert ds["meta"] == [r["meta"] for r in ROWS]
        assert ds["tags"] == [r["tags"] for r in ROWS]
        assert ds.features["meta"]["page"].dtype == "int64"


def test_a_json_file_of_json_lines_is_read_as_jsonl(tmp_path, builders):
    from contrastive_rlvr.data import load_prompts

    path = tmp_path / "lines.json"
    _write(tmp_path / "lines.jsonl", ROWS).rename(path)  # what Dataset.to_json writes
    ds = load_prompts(path).dataset
    assert builders == ["json"] and ds["answer"] == ["0", "2", "4"]
    assert ds["meta"] == [r["meta"] for r in ROWS]


def test_skipped_rows_are_left_out_of_what_datasets_reads(tmp_path, builders):
    import json

    from contrastive_rlvr.data import load_prompts

    path = tmp_path / "some-bad.jsonl"
    lines = [json.dumps(ROWS[0]), '{"question": "x", ', "", json.dumps(ROWS[2]), "[1, 2]"]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"some-bad\.jsonl line 2: invalid JSON"):
        load_prompts(path)
    loaded = load_prompts(path, skip_bad_rows=True)
    assert builders == ["json"] and loaded.skipped == 2
    ds = loaded.dataset
    assert ds["id"] == ["0", "2"]  # the row's place in the file, bad rows counted
    assert ds["meta"] == [ROWS[0]["meta"], ROWS[2]["meta"]]


def test_a_file_datasets_cannot_read_is_one_line_naming_it(tmp_path):
    from contrastive_rlvr.data import load_prompts

    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"PAR1 this is not a parquet file")
    with pytest.raises(ValueError) as err:
        load_prompts(bad)
    message = str(err.value)
    assert message.startswith(f"{bad}: datasets.load_dataset could not read it (")
    assert "\n" not in message and len(message) < 500


def test_mixed_types_in_an_extra_column_reach_the_rows(tmp_path):
    import json

    from contrastive_rlvr.data import load_prompts

    rows = [{"question": "a", "answer": 1, "note": "text"}, {"question": "b", "answer": "2",
            "note": 7}]  # fmt: skip
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")  # a blank line too
    ds = load_prompts(path).dataset
    assert ds["answer"] == ["1", "2"] and ds["note"] == ["text", 7]


# -- item: dotted field paths; the paper recipes on DAPO-Math-17k's layout ---------------

DAPO_INSTRUCTION = (
    "Solve the following math problem step by step. The last line of your response should "
    "be of the form Answer: $Answer (without quotes) where $Answer is the answer to the "
    "problem.\n\n{}\n\nRemember to put your answer on its own line after \"Answer:\"."
)
DAPO_PROBLEMS = [("What is 3 + 4?", "7"), ("How many sides has a hexagon?", "6"),
                 ("Compute 12 * 12.", "144")]  # fmt: skip


def dapo_rows(problems=DAPO_PROBLEMS) -> list[dict]:
    """Rows in DAPO-Math-17k's layout (the Hub's parquet: data_source, prompt as chat
    messages, ability, reward_model {ground_truth, style}, extra_info {index})."""
    return [
        {
            "data_source": "math_dapo",
            "prompt": [{"content": DAPO_INSTRUCTION.format(q), "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": a, "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": f"uid-{i}"},
        }
        for i, (q, a) in enumerate(problems)
    ]


PAPER_TRL = sorted((TESTS.parent / "recipes" / "paper" / "trl").glob("*.yaml"))


@pytest.mark.parametrize("recipe", PAPER_TRL, ids=lambda p: p.stem)
def test_each_trl_paper_recipe_reads_dapo_math_17k_layout(tmp_path, recipe):
    from contrastive_rlvr.run.preflight import load_dataset_of
    from contrastive_rlvr.trainer.parse import parse_config

    assert "answer_field: reward_model.ground_truth" in recipe.read_text()
    stand_in = _write(tmp_path / "dapo-math-17k.parquet", dapo_rows())
    config = parse_config(recipe, ["--bf16", "false", "--dataset", str(stand_in)])
    ds = load_dataset_of(config).dataset
    assert ds["answer"] == ["7", "6", "144"]
    assert ds["id"] == ["uid-0", "uid-1", "uid-2"]
    assert ds["prompt"] == [
        [{"role": "user", "content": DAPO_INSTRUCTION.format(q)}] for q, _ in DAPO_PROBLEMS
    ]
    # the nested columns themselves pass through to the rewards
    assert [r["ground_truth"] for r in ds["reward_model"]] == ["7", "6", "144"]
    assert ds["data_source"] == ["math_dapo"] * 3


def test_a_dotted_path_that_is_not_there_names_the_row_and_the_keys(tmp_path):
    from contrastive_rlvr.data import load_prompts

    rows = dapo_rows()
    rows[1]["reward_model"] = {"style": "rule", "answer": "6"}  # no ground_truth
    path = _write(tmp_path / "dapo.jsonl", rows)
    with pytest.raises(ValueError) as err:
        load_prompts(path, answer_field="reward_model.ground_truth")
    assert str(err.value) == (
        f"{path} line 2: missing field 'reward_model.ground_truth': no 'ground_truth' in "
        "reward_model (which has keys ['answer', 'style']); row has fields ['ability', "
        "'data_source', 'extra_info', 'prompt', 'reward_model']"
    )
    flat = _write(tmp_path / "flat.jsonl", [{"prompt": "p", "answer": "1"}])
    with pytest.raises(ValueError, match=r"line 1: .*no 'reward_model' in the row \(which has "
                       r"keys \['answer', 'prompt'\]\)"):
        load_prompts(flat, answer_field="reward_model.ground_truth")  # fmt: skip
    with pytest.raises(ValueError, match=r"line 1: missing field 'extra_info\.index'"):
        load_prompts(flat, id_field="extra_info.index")
    # a parquet row (datasets gives it every column, null where absent) reads the same
    ppath = _write(tmp_path / "dapo.parquet", rows)
    with pytest.raises(ValueError, match=r"dapo\.parquet row 2: missing field "
                       r"'reward_model\.ground_truth': no 'ground_truth' in reward_model"):
        load_prompts(ppath, answer_field="reward_model.ground_truth")  # fmt: skip


def test_dapo_layout_trains_with_nested_columns_reaching_the_reward(tmp_path):
    """DAPO-Math-17k's layout from a parquet file: the dotted answer, id and OC-GRPO
    solution paths read, and the nested columns reach the reward as dicts, in training and
    in the held-out evaluation."""
    import json

    import torch
    from inputs.test_trl_dataset_formats import _run_args, chat_model

    from contrastive_rlvr.run import train
    from contrastive_rlvr.trainer.parse import parse_config

    torch.set_num_threads(1)
    model_dir = chat_model(tmp_path / "model")
    rows = [
        {"data_source": "math_dapo", "prompt": [{"content": f"{i}+1=", "role": "user"}],
         "reward_model": {"ground_truth": str(i + 1), "style": "rule"},
         "extra_info": {"index": 100 + i, "solution": f"{i}+1={i + 1}"}}
        for i in range(10)
    ]  # fmt: skip
    data = _write(tmp_path / "dapo.parquet", rows)
    log = tmp_path / "calls.jsonl"
    reward = tmp_path / "nested_reward.py"
    reward.write_text(
        "import json\n"
        "def nested(prompts, completions, answer, reward_model, extra_info, **kwargs):\n"
        "    phase = 'train' if 'trainer_state' in kwargs else 'eval'\n"
        f"    with open({str(log)!r}, 'a') as f:\n"
        "        f.write(json.dumps([phase, list(answer), list(reward_model), list(extra_info),\n"
        "                            list(kwargs['extra_info.solution'])]) + '\\n')\n"
        "    return [float(i % 2) for i in range(len(completions))]\n"
    )
    args = _run_args(model_dir, data, tmp_path / "out",
                     "--answer_field", "reward_model.ground_truth",
                     "--id_field", "extra_info.index",
                     "--oc_grpo", "true", "--oc_solution_column", "extra_info.solution",
                     "--beta", "0", "--rewards", f"{reward}:nested")  # fmt: skip
    summary = train(parse_config(None, args), progress=False)
    assert summary["steps"] == 1
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert {c[0] for c in calls} == {"train", "eval"}
    by_answer = {str(i + 1): r for i, r in enumerate(rows)}
    for _phase, answers, reward_models, extra_infos, solutions in calls:
        for answer, rm, extra, solution in zip(
            answers, reward_models, extra_infos, solutions, strict=True
        ):
            written = by_answer[answer]
            assert rm == written["reward_model"] and extra == written["extra_info"]
            assert solution == written["extra_info"]["solution"]


def test_the_paper_recipes_reward_scores_a_dapo_style_completion(tmp_path):
    """DAPO-Math-17k's prompts ask for a last line "Answer: X": each paper recipe's reward,
    as the recipe names it (TRL: its rewards; verl: its custom_reward_function), scores
    such completions against the dataset's reward_model.ground_truth."""
    import importlib

    import yaml

    from contrastive_rlvr.rewards import resolve_reward
    from contrastive_rlvr.run.preflight import load_dataset_of
    from contrastive_rlvr.trainer.parse import parse_config

    # one completion per DAPO_PROBLEMS row (gold 7, 6, 144); the last one is wrong
    completions = ["3 + 4 = 7.\nAnswer: 7", "A hexagon has six sides.\n\n**Answer:** $6$",
                   "12 * 12 = 124.\nAnswer: 124"]  # fmt: skip
    expected = [1.0, 1.0, 0.0]
    stand_in = _write(tmp_path / "dapo-math-17k.parquet", dapo_rows())
    args = ["--bf16", "false", "--dataset", str(stand_in)]
    configs = [parse_config(recipe, args) for recipe in PAPER_TRL]
    assert len(configs) == 20 and {tuple(c.rewards) for c in configs} == {("math_verify",)}
    ds = load_dataset_of(configs[0]).dataset
    columns = {c: ds[c] for c in ds.column_names if c != "prompt"}
    messages = [[{"role": "assistant", "content": c}] for c in completions]
    reward = resolve_reward(configs[0].rewards[0])
    try:
        assert reward(prompts=ds["prompt"], completions=messages, **columns) == expected
    finally:
        reward.close()

    paper_verl = sorted((TESTS.parent / "recipes" / "paper" / "verl").glob("*.yaml"))
    named = {str(yaml.safe_load(p.read_text())["reward"]["custom_reward_function"])
             for p in paper_verl}  # fmt: skip
    assert len(paper_verl) == 20 and len(named) == 1
    function = yaml.safe_load(paper_verl[0].read_text())["reward"]["custom_reward_function"]
    assert function["path"].startswith("pkg://")
    module = importlib.import_module(function["path"].removeprefix("pkg://"))
    compute_score = getattr(module, function["name"])
    rows = dapo_rows()
    scores = [
        compute_score(r["data_source"], c, r["reward_model"]["ground_truth"], r["extra_info"])
        for c, r in zip(completions, rows, strict=True)
    ]
    assert scores == expected
    # and no recipe still tells the user the line is not read
    for path in [*PAPER_TRL, *paper_verl]:
        text = " ".join(path.read_text().replace("#", " ").split())
        assert "reads the last line 'Answer: X' that DAPO-Math-17k's prompts ask for" in text
        assert "which it does not read" not in text, path


def test_the_default_reference_model_is_the_delta_diagnostics_one(tmp_path):
    """beta 0 builds no reference for the KL; the one RLVRConfig() still builds is the
    delta diagnostics' (log_delta, on by default; the README's defaults table says so)."""
    from trainer_utils import make_trainer, save_tiny_model

    from contrastive_rlvr.trainer import RLVRConfig

    model_dir = save_tiny_model(tmp_path / "model")
    small = dict(output_dir=str(tmp_path / "out"), report_to="none", num_generations=4,
                 per_device_train_batch_size=8, max_completion_length=4, max_steps=1)  # fmt: skip
    config = RLVRConfig(**small)
    assert config.beta == 0.0 and config.log_delta
    assert make_trainer(model_dir, config).ref_model is not None
    off = RLVRConfig(**small, log_delta=False)
    assert make_trainer(model_dir, off).ref_model is None  # as GRPOTrainer at beta 0
