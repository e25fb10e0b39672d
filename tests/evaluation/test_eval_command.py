"""The eval command: pass@k/avg@n reports, hand-made samples, a tiny-model run that resumes."""

import json
import math

import pytest
from typer.testing import CliRunner

from contrastive_rlvr.cli import app
from contrastive_rlvr.evaluation import EvalConfig, evaluate, ks_for, summarize
from contrastive_rlvr.evaluation.run import _score
from contrastive_rlvr.evaluation.suites import PACKAGED_DIR
from contrastive_rlvr.generation import HFGenerator
from contrastive_rlvr.rewards import MathVerifyReward


def test_ks_for():
    assert ks_for(32) == [1, 2, 4, 8, 16, 32]
    assert ks_for(6) == [1, 2, 4, 6]
    assert ks_for(1) == [1]


def test_summarize_hand_worked():
    # 3 problems, n = 4, correct counts c = 0, 1, 4.
    correct = [[0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 1, 1]]
    unparsed = [[1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    r = summarize("hand", correct, unparsed)
    # avg@4 = (0/4 + 1/4 + 4/4) / 3 = 1.25 / 3
    assert r.avg_at_n == pytest.approx(1.25 / 3)
    # pass@1 = c/n per problem = avg@n
    assert r.pass_at_k[1] == pytest.approx(1.25 / 3)
    # pass@2: c=0 -> 0; c=1 -> 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5; c=4 -> 1. Mean 1.5/3.
    assert r.pass_at_k[2] == pytest.approx(0.5)
    # pass@4: c=1 -> n-c = 3 < 4 -> 1. Mean (0 + 1 + 1)/3.
    assert r.pass_at_k[4] == pytest.approx(2 / 3)
    assert sorted(r.pass_at_k) == [1, 2, 4]
    assert r.unparsable == 2 and r.samples == 12 and r.problems == 3


def test_score_hand_made_samples(tmp_path):
    golds = ["\\frac{1}{2}", "7"]
    completions = [
        ["\\boxed{0.5}", "\\boxed{1/2}", "\\boxed{2}", "no answer here"],  # c = 2
        ["<answer>7</answer>", "\\boxed{8}", "\\boxed{8}", "\\boxed{8}"],  # c = 1
    ]
    with MathVerifyReward(timeout=2, workers=1) as reward:
        r = _score(reward, "hand", ["a", "b"], golds, completions, tmp_path / "s.jsonl")
    # avg@4 = (2/4 + 1/4) / 2
    assert r.avg_at_n == pytest.approx(0.375)
    # pass@2: 1 - C(2,2)/C(4,2) = 5/6 and 1 - C(3,2)/C(4,2) = 1/2; mean 2/3
    assert r.pass_at_k[2] == pytest.approx((5 / 6 + 1 / 2) / 2)
    assert r.pass_at_k[4] == pytest.approx(1.0)
    assert r.unparsable == 1
    rows = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [row["reward"] for row in rows] == [1, 1, 0, 0, 1, 0, 0, 0]
    assert rows[4]["answer"] == "7" and rows[3]["status"] == "no_answer"


def test_config_validation():
    with pytest.raises(ValueError, match="unknown benchmark 'gsm9k'"):
        EvalConfig(model="m", benchmarks=["gsm9k"])
    with pytest.raises(ValueError, match="top_p"):
        EvalConfig(model="m", top_p=0.0)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A randomly initialised 2-layer Llama with a character tokenizer, saved locally."""
    from contrastive_rlvr.embedded.model import build_tiny_model
    from contrastive_rlvr.embedded.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, hidden=32, layers=2, heads=2, mlp=64, max_positions=1024)
    path = tmp_path_factory.mktemp("tiny") / "model"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_eval_smoke_writes_json_and_resumes(tiny_model_dir, tmp_path, monkeypatch):
    data_dir = PACKAGED_DIR  # gsm8k ships with the package
    out = tmp_path / "out"
    config = EvalConfig(
        model=str(tiny_model_dir),
        benchmarks=["gsm8k"],
        n=2,
        limit=2,
        max_new_tokens=6,
        output_dir=str(out),
        benchmarks_dir=str(data_dir),
        reward_workers=1,
        progress=False,
    )
    calls = []
    real_generate = HFGenerator.generate

    def counting_generate(self, prompts, seed):
        calls.append((len(prompts), seed))
        return real_generate(self, prompts, seed)

    monkeypatch.setattr(HFGenerator, "generate", counting_generate)
    first = evaluate(config).reports[0]
    assert sorted(calls, key=lambda c: c[1]) == [(2, 0), (2, 1)]  # one batch per seed
    results = json.loads((out / "results.json").read_text())
    assert results["benchmarks_dir"] == str(PACKAGED_DIR)  # the folder read, not null
    assert results["benchmark_sources"]["gsm8k"]["origin"] == "benchmarks_dir"
    report = results["benchmarks"]["gsm8k"]
    assert (report["problems"], report["n"], report["samples"]) == (2, 2, 4)
    assert set(report["pass_at_k"]) == {"1", "2"}
    assert math.isclose(report["avg_at_n"], first.avg_at_n)
    samples = (out / "samples" / "gsm8k.jsonl").read_text().splitlines()
    assert len(samples) == 4
    (cache_file,) = (out / "generations").glob("gsm8k-*.jsonl")
    lines = cache_file.read_text().splitlines()
    assert len(lines) == 4

    # Interrupted run: the last sample was cut off mid-write. Only its batch (seed 1) is
    # redone, whole: HF draws a batch from one seed, so a sample depends on its batch.
    cache_file.write_text("\n".join(lines[:3]) + "\n" + lines[3][:10])
    calls.clear()
    evaluate(config)
    assert calls == [(2, 1)]

    # Everything cached: the CLI runs without generating at all.
    def no_generate(self, prompts, seed):
        raise AssertionError("generate called despite a full cache")

    monkeypatch.setattr(HFGenerator, "generate", no_generate)
    args = ["eval", "--model", str(tiny_model_dir), "--benchmarks", "gsm8k", "--n", "2"]
    args += ["--limit", "2", "--max-new-tokens", "6", "--output-dir", str(out)]
    args += ["--benchmarks-dir", str(data_dir)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "gsm8k" in result.output and "pass@2" in result.output


def test_cli_reports_bad_input():
    result = CliRunner().invoke(app, ["eval", "--model", "m", "--benchmarks", "nope"])
    assert result.exit_code == 2
    assert "unknown benchmark 'nope'" in result.output


def test_benchmark_fields_without_a_file_is_refused():
    with pytest.raises(ValueError, match="names none"):
        EvalConfig(model="m", benchmarks=["math500"], benchmark_fields="prompt=q")


def test_eval_of_a_file_with_a_field_mapping_records_what_it_read(tiny_model_dir, tmp_path):
    data = tmp_path / "data[v2]" / "heldout.jsonl"  # brackets: printed as written
    data.parent.mkdir()
    rows = [{"id": f"wp-{i}", "question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}
            for i in range(3)]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out[1]"
    args = ["eval", "--model", str(tiny_model_dir), "--benchmarks", f"sums={data}", "--n", "1"]
    args += ["--benchmark-fields", "prompt=question,answer=answer,id=id,format=gsm8k"]
    args += ["--max-new-tokens", "4", "--output-dir", str(out), "--backend", "hf"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert results["benchmarks_dir"] == str(data.parent)
    assert results["benchmark_sources"] == {"sums": {"source": str(data), "origin": "file"}}
    report = results["benchmarks"]["sums"]
    assert (report["problems"], report["samples"], report["source"]) == (3, 3, str(data))
    golds = [
        json.loads(x)["gold"] for x in (out / "samples" / "sums.jsonl").read_text().split("\n") if x
    ]
    assert golds == ["1", "2", "3"]
    assert f"sums: read from {data}" in result.output.replace("\n", "")
    assert f"results: {out / 'results.json'}" in result.output.replace("\n", "")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [([], True), (["--no-answer-line"], False), (["--no_answer_line"], False),
     (["--answer-line"], True)],
)  # fmt: skip
def test_eval_cli_reads_the_answer_line_unless_told_not_to(tmp_path, monkeypatch, flags,
                                                           expected):  # fmt: skip
    import contrastive_rlvr.evaluation as evaluation

    configs = []
    monkeypatch.setattr(evaluation, "evaluate", configs.append)
    args = ["eval", "--model", "m", "--benchmarks", "gsm8k", "--n", "1", *flags]
    result = CliRunner().invoke(app, [*args, "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert [c.answer_line for c in configs] == [expected]


@pytest.mark.parametrize("answer_line", [True, False])
def test_eval_config_answer_line_reaches_the_reward(tiny_model_dir, tmp_path, monkeypatch,
                                                    answer_line):  # fmt: skip
    import contrastive_rlvr.evaluation.run as run

    built = []

    def recording(**kwargs):
        built.append(kwargs)
        raise RuntimeError("stop once the reward is built")

    monkeypatch.setattr(run, "MathVerifyReward", recording)
    config = EvalConfig(model=str(tiny_model_dir), benchmarks=["gsm8k"], n=1, limit=1,
                        max_new_tokens=2, output_dir=str(tmp_path / "out"),
                        benchmarks_dir=str(PACKAGED_DIR), progress=False,
                        answer_line=answer_line)  # fmt: skip
    with pytest.raises(RuntimeError, match="stop once"):
        evaluate(config)
    assert [b["answer_line"] for b in built] == [answer_line]
