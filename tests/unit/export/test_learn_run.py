"""``learn_from``'s pieces that need no training: the recipe presets, the work folder, where the labels come from."""

from __future__ import annotations

from pathlib import Path

import pytest

from semdup.data.paths import semeval_train_files
from semdup.export.learn_run import _labels, recipe, work_dir_for
from semdup.training.learn.settings import LearnSettings


def test_the_minilm_recipe_is_the_dev_chosen_default_and_overrides_apply() -> None:
    assert recipe() == LearnSettings()
    assert recipe("minilm", epochs=1.5, seed=None) == LearnSettings(epochs=1.5)
    mp = recipe("mpnet")
    assert (mp.base_encoder, mp.max_len, mp.freeze_layers, mp.epochs) == ("mpnet", 128, 8, 1.0)
    with pytest.raises(ValueError, match="accepted: minilm, mpnet"):
        recipe("bert")


def test_the_work_folder_sits_beside_the_candidate() -> None:
    assert work_dir_for("artifacts/learned/semeval") == Path("artifacts/learned/semeval.work")


def test_labels_come_from_a_name_a_path_or_an_index_field() -> None:
    sup, split, corpus, name = _labels("semeval", None, None, None, "title", "body")
    assert split is not None and split.report.by == "official" and name == "semeval" and corpus
    sup, split, corpus, name = _labels(str(semeval_train_files()[1]), None, None, None, "title", "body")
    assert sup.kind == "rerank" and split is None and not corpus  # a path is split automatically
    with pytest.raises(ValueError, match="give data"):
        _labels(None, None, "site", None, "title", "body")
