"""resolve_settings: the arch's defaults, then the dev-chosen ones of (arch, data set), then the caller's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from semdup.core.errors import ConfigError
from semdup.training import run_settings
from semdup.training.recipes import RECIPE_DEFAULTS, DataPaths
from semdup.training.registry import get_arch
from semdup.training.run_settings import RECIPE_OPTIONS, resolve_settings


def test_dev_chosen_defaults_apply_over_the_arch_defaults() -> None:
    chosen = RECIPE_DEFAULTS[("bow-cnn", "travel")]
    run = resolve_settings("bow-cnn", "travel")
    assert run.settings.lr == chosen["lr"] and run.settings.max_tokens == chosen["max_tokens"]
    assert run.settings.dense_scales == chosen["dense_scales"]
    assert dict(run.settings.hparams) == chosen["hparams"]
    assert run.settings.batch_size == get_arch("bow-cnn").train_defaults["batch_size"]  # not chosen on dev
    assert (run.lexical_negatives, run.related_negatives) == (chosen["lexical_negatives"], chosen["related_negatives"])
    assert run.random_pair_negatives == RECIPE_OPTIONS["random_pair_negatives"]
    assert "hparams" not in run.dev_chosen and "lexical_negatives" not in run.dev_chosen
    assert run.dev_chosen["lr"] == chosen["lr"]


def test_given_values_win_and_none_means_not_given() -> None:
    run = resolve_settings(
        "bow-cnn",
        "travel",
        {"lr": 1e-4, "epochs": None, "seed": 3, "lexical_negatives": 5, "related_negatives": None},
        hparams={"conv_units": 200, "freeze_embeddings": False},
    )
    chosen = RECIPE_DEFAULTS[("bow-cnn", "travel")]
    assert run.settings.lr == 1e-4 and run.settings.epochs == chosen["epochs"] and run.settings.seed == 3
    assert run.lexical_negatives == 5 and run.related_negatives == chosen["related_negatives"]
    assert dict(run.settings.hparams) == {**chosen["hparams"], "conv_units": 200, "freeze_embeddings": False}


def test_a_pair_without_dev_chosen_defaults_keeps_the_arch_and_recipe_defaults() -> None:
    run = resolve_settings("cnn", "semeval")
    spec = get_arch("cnn")
    assert run.settings.lr == spec.train_defaults["lr"] and run.settings.negatives == spec.train_defaults["negatives"]
    assert dict(run.settings.hparams) == {} and dict(run.dev_chosen) == {}
    assert (run.lexical_negatives, run.related_negatives, run.random_pair_negatives) == tuple(RECIPE_OPTIONS.values())
    assert resolve_settings("scqa", "travel").random_pair_negatives == RECIPE_DEFAULTS[("scqa", "travel")][
        "random_pair_negatives"
    ]


def test_unknown_or_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"unknown training settings \['colour'\]"):
        resolve_settings("bow-cnn", "travel", {"colour": "blue"})
    with pytest.raises(ConfigError, match="optimizer 'rmsprop' is not one of"):
        resolve_settings("bow-cnn", "semeval", {"optimizer": "rmsprop"})


def test_build_recipe_gets_the_runs_recipe_settings(monkeypatch) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(run_settings, "build_recipe", lambda *a, **kw: calls.append((a, kw)))
    run = resolve_settings("scqa", "travel", {"negatives": 7, "seed": 2})
    paths = DataPaths((Path("dump"),))
    run.build_recipe(paths, report_test=False)
    ((args, kwargs),) = calls
    assert args == ("travel", paths)
    assert kwargs == {
        "negatives": 7,
        "seed": 2,
        "lexical_negatives": RECIPE_OPTIONS["lexical_negatives"],
        "qa_pairs": False,
        "report_test": False,
        "related_negatives": RECIPE_OPTIONS["related_negatives"],
        "random_pair_negatives": RECIPE_DEFAULTS[("scqa", "travel")]["random_pair_negatives"],
    }


def test_parse_set_reads_json_values_and_refuses_an_item_without_equals() -> None:
    from semdup.training.run_settings import parse_set

    assert parse_set(["conv_units=200", "lr=1e-3", "tied=true", "name=a=b", " k =x"]) == {
        "conv_units": 200, "lr": 1e-3, "tied": True, "name": "a=b", "k": "x"}
    with pytest.raises(ValueError, match="expected key=value, got 'epochs'"):
        parse_set(["epochs"])
