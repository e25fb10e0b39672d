"""A recipe a user registers is known everywhere a recipe is read: the ``recipes``
command, ``compare`` (its rows and labels), the TRL path (its TRL route and BiCC ratio
mode) and verl's per-recipe default and policy-loss registry (``crlvr_<recipe>``, through
the registry's listeners); no second table has to be edited. verl itself is exercised in
tests/scale_out/test_verl_recipe_registration.py (its environment)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from contrastive_rlvr.algorithms import RECIPES
from contrastive_rlvr.algorithms.bicc_defaults import (
    RECIPE_BICC_RATIO_MODE,
    UNLISTED_RATIO_MODE,
    default_bicc_ratio_mode,
)
from contrastive_rlvr.algorithms.registry import (
    _LISTENERS,
    Recipe,
    on_recipe_registered,
    register_recipe,
)
from contrastive_rlvr.cli import app
from contrastive_rlvr.compare import CompareSpec, recipe_label
from contrastive_rlvr.trainer.parse import parse_config
from contrastive_rlvr.trainer.trl_settings import TRL_ROUTES, TRLRoute, uses_trl_loss


@pytest.fixture
def my_recipe():
    recipe = register_recipe(
        Recipe(
            "my_grpo",
            "policy",
            "grpo",
            False,
            0.0,
            "a user's variant",
            "GRPO without std scaling, TRL's grpo loss",
            label="My GRPO",
            bicc_ratio_mode="consistent",
            trl_loss_type="grpo",
        )
    )
    yield recipe
    del RECIPES["my_grpo"]


def test_builtin_tables_read_the_recipe_table() -> None:
    assert TRL_ROUTES == {
        "grpo": TRLRoute("grpo", "token"),
        "dr_grpo": TRLRoute("dr_grpo", "token"),
        "dapo": TRLRoute("dapo", "token"),
        "gspo": TRLRoute("grpo", "sequence"),
    }
    assert [recipe_label(r) for r in RECIPES] == [
        "GRPO",
        "Dr.GRPO",
        "DAPO",
        "GMPO",
        "GSPO",
        "ConSPO",
    ]
    assert default_bicc_ratio_mode("vanilla") == UNLISTED_RATIO_MODE == "paper"


def test_registered_recipe_reaches_every_reader(my_recipe) -> None:
    listing = CliRunner().invoke(app, ["recipes"])
    assert listing.exit_code == 0
    assert "my_grpo" in listing.output and "a user's variant" in listing.output

    assert "my_grpo" in CompareSpec().recipes
    assert recipe_label("my_grpo") == "My GRPO"
    CompareSpec(recipes=["my_grpo"], seeds=[0])  # accepted, not "unknown recipe"

    assert TRL_ROUTES["my_grpo"] == TRLRoute("grpo", "token")
    assert RECIPE_BICC_RATIO_MODE["my_grpo"] == "consistent"
    # verl's config takes the same default through bicc_defaults
    assert default_bicc_ratio_mode("my_grpo") == "consistent"

    cfg = parse_config(
        None, ["--recipe", "my_grpo", "--bicc", "true", "--bicc_form", "conditioned"]
    )
    assert cfg.bicc_ratio_mode == "consistent"
    assert uses_trl_loss(cfg)


def test_unregistered_recipe_leaves_no_trace(my_recipe) -> None:
    del RECIPES["my_grpo"]
    try:
        assert "my_grpo" not in TRL_ROUTES and "my_grpo" not in RECIPE_BICC_RATIO_MODE
        with pytest.raises(ValueError, match="unknown recipe 'my_grpo'"):
            CompareSpec(recipes=["my_grpo"])
    finally:
        RECIPES["my_grpo"] = my_recipe


def test_a_listener_hears_of_every_recipe_before_and_after_it_subscribed() -> None:
    """How verl's loss registry follows the table (integrations/verl/losses.py): the
    recipes already registered, then each one added later, whichever comes first."""
    heard: list[str] = []

    def listener(recipe: Recipe) -> None:
        heard.append(recipe.name)

    try:
        on_recipe_registered(listener)
        on_recipe_registered(listener)  # kept once, but told of the table each time
        assert heard == [*RECIPES, *RECIPES]
        heard.clear()
        on_recipe_registered(listener)
        assert heard == list(RECIPES)
        late = register_recipe(
            Recipe("my_late", "policy", "gspo", True, 0.0, "a user's variant", "GSPO again")
        )
        assert heard == [*[r for r in RECIPES if r != "my_late"], "my_late"]
        assert late is RECIPES["my_late"]
    finally:
        _LISTENERS.remove(listener)
        RECIPES.pop("my_late", None)
    assert listener not in _LISTENERS
