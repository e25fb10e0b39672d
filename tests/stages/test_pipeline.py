"""The pipeline: stages run in order, each timed; reads checked when it is built;
the stage list built from the config (a switch adds its stage)."""

from __future__ import annotations

import pytest
import torch
from stage_utils import CharTokenizer, context, make_batch

from contrastive_rlvr.trainer import RLVRConfig
from contrastive_rlvr.trainer.stages import Pipeline, RunFacts, build_stages


class Append:
    def __init__(self, name: str, reads=(), writes=()) -> None:
        self.name, self.reads, self.writes = name, reads, writes

    def __call__(self, batch, ctx):
        batch.shared.setdefault("order", []).append(self.name)
        return batch


def test_stages_run_in_order_and_are_timed():
    pipeline = Pipeline([Append("a", writes=("shared.x",)), Append("b", reads=("shared.x",))])
    batch = make_batch([[1]] * 2, [[5]] * 2, [1, 0])
    ctx, logged = context(2)
    pipeline(batch, ctx)
    assert batch.shared["order"] == ["a", "b"]
    assert set(logged) == {"timing_s/a", "timing_s/b"}
    assert all(v[0] >= 0 for v in logged.values())


def test_a_read_nothing_writes_fails_when_built():
    with pytest.raises(ValueError, match=r"stage 'b' reads \['shared.x'\]"):
        Pipeline([Append("a"), Append("b", reads=("shared.x",))])
    Pipeline([Append("b", reads=("shared.x?",))])  # an optional read is fine


def test_a_loss_read_no_stage_writes_is_refused_when_built():
    with pytest.raises(ValueError) as refused:
        Pipeline([Append("a", writes=("data.x",))], loss_reads=("data.x", "data.y", "data.z?"))
    message = str(refused.value)
    assert message.startswith("the loss reads ['data.y'], which no earlier stage writes")
    assert "\n" not in message
    Pipeline([Append("a", writes=("data.x",))], loss_reads=("data.x", "data.completion_ids"))


@pytest.mark.parametrize(
    "fields",
    [
        {}, {"recipe": "conspo"}, {"recipe": "gmpo"}, {"recipe": "dapo"}, {"reco": True},
        {"verigate": True}, {"oc_grpo": True}, {"rcc": True, "rcc_reference": "sampling"},
        {"recipe": "conspo", "rcc": True, "rcc_reference": "sampling"},
        {"bicc": True}, {"bicc": True, "bicc_form": "conditioned"},
        {"bicc": True, "bicc_form": "conditioned", "bicc_mix": 0.5, "recipe": "gmpo"},
        {"bicc": True, "bicc_form": "conditioned", "rcc": True, "rcc_reference": "sampling"},
    ],
)  # fmt: skip
def test_every_loss_gets_what_it_reads_from_the_stages(tmp_path, fields):
    from contrastive_rlvr.algorithms import get_recipe
    from contrastive_rlvr.trainer.loss import build_loss

    cfg = RLVRConfig(output_dir=str(tmp_path), report_to="none", num_generations=4,
                     log_delta=False, beta=0.0, max_completion_length=8, **fields)  # fmt: skip
    loss = build_loss(cfg, get_recipe(cfg.recipe))
    assert {"data.completion_ids", "data.completion_mask"} <= set(loss.reads)
    facts = RunFacts(tokenizer=CharTokenizer(), group_size=4, has_reference=False)
    build_stages(cfg, facts, loss.reads)  # refused if a key the loss needs is not written


def test_a_distill_loss_without_the_teacher_stage_is_refused_when_built(tmp_path):
    from contrastive_rlvr.algorithms import get_recipe
    from contrastive_rlvr.trainer.loss import build_loss

    fields = dict(output_dir=str(tmp_path), report_to="none", num_generations=4,
                  log_delta=False, beta=0.0, max_completion_length=8)  # fmt: skip
    loss = build_loss(RLVRConfig(**fields, bicc=True), get_recipe("grpo"))
    facts = RunFacts(tokenizer=CharTokenizer(), group_size=4, has_reference=False)
    keys = r"\['data.bicc_teacher_logps', 'data.bicc_taught'\]"
    with pytest.raises(ValueError, match=rf"^the loss reads {keys}, which no earlier stage"):
        build_stages(RLVRConfig(**fields), facts, loss.reads)  # no BiCC: no teacher stage


def names(tmp_path, has_reference=False, **fields):
    cfg = RLVRConfig(
        output_dir=str(tmp_path), report_to="none", num_generations=4, log_delta=False,
        beta=0.0, max_completion_length=8, **fields,
    )  # fmt: skip
    facts = RunFacts(tokenizer=CharTokenizer(), group_size=4, has_reference=has_reference)
    pipelines = build_stages(cfg, facts)
    return pipelines["train"].names, pipelines["eval"].names


def test_each_switch_adds_its_stage(tmp_path):
    base = ["rewards", "advantages", "diagnostics"]
    assert names(tmp_path) == (base, base)
    train, _ = names(tmp_path, has_reference=True, rcc=True)
    assert train == ["rewards", "logprobs", "advantages", "diagnostics"]
    train, _ = names(tmp_path, bicc=True, bicc_form="conditioned")  # paper ratio: plain pi_old
    assert train == ["rewards", "logprobs", "advantages", "conditioned_prompts", "diagnostics"]
    train, _ = names(tmp_path, bicc=True)  # the default form: the teacher's stage
    assert train == ["rewards", "advantages", "teacher_prompts", "diagnostics"]
    train, _ = names(tmp_path, verigate=True)
    assert train == ["rewards", "advantages", "process_advantages", "diagnostics"]
    train, _ = names(tmp_path, reco=True)
    assert train == ["rewards", "advantages", "occurrence_weights", "diagnostics"]
    # The stages that sample again run in training only.
    train, evaluation = names(tmp_path, oc_grpo=True)
    assert train == ["hinted_round", *base] and evaluation == base
    train, evaluation = names(tmp_path, recipe="dapo", overlong_punishment=False)
    assert train == ["dynamic_sampling", *base] and evaluation == base
    # A reward threshold, no advantages; the stage counts the usable groups (the normaliser).
    train, _ = names(tmp_path, recipe="conspo")
    assert train == ["rewards", "advantages", "diagnostics"]


def test_skip_group_masks_first_and_restores_after_the_resampling_stages(tmp_path):
    facts = {"skipped_rows": lambda: None}
    cfg = dict(output_dir=str(tmp_path), report_to="none", num_generations=4, log_delta=False,
               beta=0.0, max_completion_length=8, nonfinite_rewards="skip_group")  # fmt: skip
    built = build_stages(RLVRConfig(**cfg), RunFacts(CharTokenizer(), 4, False, **facts))
    base = ["rewards", "advantages", "diagnostics"]
    assert built["train"].names == built["eval"].names == ["skip_nonfinite", *base]
    dapo = RLVRConfig(**cfg, recipe="dapo", overlong_punishment=False)
    built = build_stages(dapo, RunFacts(CharTokenizer(), 4, False, **facts))
    assert built["train"].names == ["skip_nonfinite", "dynamic_sampling", "restore_skipped", *base]
    assert built["eval"].names == ["skip_nonfinite", *base]
    with pytest.raises(ValueError, match="needs RunFacts.skipped_rows"):
        build_stages(RLVRConfig(**cfg), RunFacts(CharTokenizer(), 4, False))


def test_rcc_without_a_reference_is_refused_when_built(tmp_path):
    with pytest.raises(ValueError, match="reads \\['shared.delta'\\]"):
        names(tmp_path, has_reference=False, rcc=True)


def test_a_built_pipeline_runs_on_a_hand_made_batch(tmp_path):
    cfg = RLVRConfig(output_dir=str(tmp_path), report_to="none", num_generations=2,
                     recipe="dr_grpo", log_delta=False, max_completion_length=8)  # fmt: skip
    pipeline = build_stages(cfg, RunFacts(CharTokenizer(), 2, has_reference=False))["train"]
    batch = make_batch([[1]] * 2, [[5]] * 2, [1, 0])
    ctx, logged = context(2)
    pipeline(batch, ctx)
    assert batch.data["rewards"].tolist() == [1, 0]
    assert batch.data["advantages"].tolist() == [0.5, -0.5]
    assert logged["reward/accuracy"] == [0.5]
    assert {f"timing_s/{n}" for n in pipeline.names} <= set(logged)
    assert torch.equal(batch.shared["stats"]["rewards"], torch.tensor([1.0, 0.0]))


def test_the_architecture_table_lists_every_stage():
    from pathlib import Path

    import contrastive_rlvr.trainer.stages as stages

    doc = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    rows = {line.split("|")[2].strip(): line for line in doc.splitlines() if "| `" in line}
    classes = [getattr(stages, n) for n in stages.__all__]
    named = [c for c in classes if isinstance(getattr(c, "name", None), str)]
    assert len(named) == 11
    for cls in named:
        key = f"`{cls.__name__}` (`{cls.name}`)"
        assert key in rows, f"docs/architecture.md has no row for {key}"
        assert f"`{cls.__module__.rsplit('.', 1)[1]}.py`" in rows[key]
