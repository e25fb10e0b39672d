"""Every TRL loss field a recipe sets is honoured or rejected by name before any model
loads (trainer/trl_settings.py; the table in docs/trl-parity.md)."""

from __future__ import annotations

import pytest

from contrastive_rlvr.trainer import RLVRConfig
from contrastive_rlvr.trainer.trl_settings import project_loss_reason, uses_trl_loss


def config(tmp_path, **fields) -> RLVRConfig:
    values = dict(output_dir=str(tmp_path), report_to="none", num_generations=4)
    values.update(per_device_train_batch_size=4, max_completion_length=8)
    return RLVRConfig(**{**values, **fields})


@pytest.mark.parametrize(
    ("recipe", "loss_type", "level", "low", "high", "scale"),
    [
        ("grpo", "grpo", "token", 0.2, 0.2, "group"),
        ("dr_grpo", "dr_grpo", "token", 0.2, 0.2, "none"),
        ("dapo", "dapo", "token", 0.2, 0.28, "group"),
        ("gspo", "grpo", "sequence", 3e-4, 4e-4, "group"),
    ],
)
def test_recipes_map_onto_trl_settings(tmp_path, recipe, loss_type, level, low, high, scale):
    cfg = config(tmp_path, recipe=recipe)
    assert uses_trl_loss(cfg)
    assert (cfg.loss_type, cfg.importance_sampling_level) == (loss_type, level)
    assert (cfg.epsilon, cfg.epsilon_high, cfg.clip_low, cfg.clip_high) == (low, high, low, high)
    assert cfg.scale_rewards == scale and cfg.use_bias_correction_kl is False


def test_trl_names_are_the_clip_bounds(tmp_path):
    assert config(tmp_path, epsilon_high=0.28).clip_high == 0.28
    # As TRL: epsilon alone sets both bounds of a symmetric recipe; DAPO keeps its 0.28.
    cfg = config(tmp_path, epsilon=0.3)
    assert (cfg.clip_low, cfg.clip_high) == (0.3, 0.3)
    cfg = config(tmp_path, recipe="dapo", epsilon=0.3)
    assert (cfg.epsilon, cfg.epsilon_high) == (0.3, 0.28)
    assert config(tmp_path, clip_low=0.1, epsilon=0.1).epsilon == 0.1
    with pytest.raises(ValueError, match=r"^epsilon=0.3 is invalid: it is TRL's name for clip_low"):
        config(tmp_path, clip_low=0.1, epsilon=0.3)
    with pytest.raises(ValueError, match="epsilon_high=0.3 is invalid: .*clip_high"):
        config(tmp_path, clip_high=0.2, epsilon_high=0.3)


def test_loss_type_and_loss_agg(tmp_path):
    assert config(tmp_path, loss_type="sapo").loss_type == "sapo"  # TRL's loss runs
    assert config(tmp_path, loss_agg="token-mean").loss_type == "dapo"
    with pytest.raises(ValueError, match="loss_type='dapo' is invalid: it contradicts loss_agg"):
        config(tmp_path, loss_type="dapo", loss_agg="seq-mean-token-mean")
    # The project's loss takes the loss types that are one of its aggregations ...
    assert config(tmp_path, reco=True, loss_type="dapo").loss_agg == "token-mean"
    # ... and rejects the others, and TRL's sequence level on a token-level loss.
    with pytest.raises(ValueError, match=r"loss_type='sapo' is invalid: .*reco=True.*loss_agg"):
        config(tmp_path, reco=True, loss_type="sapo")
    with pytest.raises(
        ValueError, match=r"importance_sampling_level='sequence' is invalid: .*gmpo"
    ):
        config(tmp_path, recipe="gmpo", importance_sampling_level="sequence")


def test_scale_rewards(tmp_path):
    assert config(tmp_path, recipe="dr_grpo", scale_rewards="group").scale_rewards == "group"
    assert config(tmp_path, scale_rewards=False).scale_rewards == "none"
    assert config(tmp_path, scale_rewards="batch").scale_rewards == "batch"
    with pytest.raises(ValueError, match=r"^rcc=True is invalid: scale_rewards='batch'"):
        config(tmp_path, scale_rewards="batch", rcc=True)
    with pytest.raises(ValueError, match="dynamic_sampling=True is invalid: multi_objective"):
        config(tmp_path, multi_objective_aggregation="normalize_then_sum", dynamic_sampling=True)


def test_effective_recipe_scales_the_advantages(tmp_path):
    from contrastive_rlvr.trainer.trl_settings import effective_recipe

    assert effective_recipe(config(tmp_path, recipe="dr_grpo")).scale_by_std is False
    assert effective_recipe(config(tmp_path, recipe="dr_grpo", scale_rewards="group")).scale_by_std
    assert not effective_recipe(config(tmp_path, scale_rewards="none")).scale_by_std


def test_conspo_beta_and_clip_are_rejected(tmp_path):
    conspo = dict(recipe="conspo", bicc=False)
    with pytest.raises(ValueError, match="^beta=0.1 is invalid: recipe='conspo' has no KL term"):
        config(tmp_path, beta=0.1, **conspo)
    with pytest.raises(ValueError, match="^epsilon_high=0.28 is invalid: recipe='conspo'"):
        config(tmp_path, epsilon_high=0.28, **conspo)
    assert config(tmp_path, **conspo).beta == 0.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("entropy_coef", 0.01),
        ("use_adaptive_entropy", True),
        ("top_entropy_quantile", 0.2),
        ("delta", 2.0),
    ],
)
def test_trl_loss_options_are_rejected_by_the_project_loss(tmp_path, field, value):
    assert config(tmp_path, **{field: value}).loss_type == "grpo"  # TRL's loss honours it
    with pytest.raises(ValueError, match=rf"^{field}={value!r} is invalid: .*recipe='gmpo'"):
        config(tmp_path, recipe="gmpo", **{field: value})


def test_the_project_loss_takes_the_sampling_correction(tmp_path):
    # Applied as TRL applies them (tests/trainer/test_sampling_correction.py), so no recipe refuses.
    for recipe in ("gmpo", "conspo"):
        cfg = config(tmp_path, recipe=recipe, off_policy_mask_threshold=0.5)
        assert cfg.off_policy_mask_threshold == 0.5


def test_the_project_loss_rejects_bias_corrected_kl(tmp_path):
    assert config(tmp_path, beta=0.04, use_bias_correction_kl=True).use_bias_correction_kl
    with pytest.raises(ValueError, match=r"^use_bias_correction_kl=True is invalid: .*gmpo"):
        config(tmp_path, recipe="gmpo", beta=0.04, use_bias_correction_kl=True)


def test_which_runs_use_the_project_loss(tmp_path):
    assert "recipe='gmpo'" in project_loss_reason(config(tmp_path, recipe="gmpo"))
    assert "reco=True" in project_loss_reason(config(tmp_path, reco=True))
    assert "bicc_mix=0.5" in project_loss_reason(config(tmp_path, bicc=True, bicc_mix=0.5))
    assert uses_trl_loss(config(tmp_path, bicc=True, bicc_mix=1.0))
    assert uses_trl_loss(config(tmp_path, rcc=True, rcc_reference="reference"))
    sampling = config(tmp_path, rcc=True, rcc_reference="sampling")
    assert "rcc_reference='sampling'" in project_loss_reason(sampling)


def test_a_saved_config_reloads_to_the_same_values(tmp_path):
    import dataclasses

    for recipe in ("grpo", "dapo", "gspo", "gmpo"):
        cfg = config(tmp_path, recipe=recipe, epsilon_high=0.5)
        fields = ("loss_type", "importance_sampling_level", "epsilon", "epsilon_high")
        given = {f: getattr(cfg, f) for f in (*fields, "clip_low", "clip_high", "scale_rewards")}
        again = config(tmp_path, recipe=recipe, **given)
        assert all(getattr(again, f) == getattr(cfg, f) for f in given), recipe
        assert dataclasses.is_dataclass(again)
