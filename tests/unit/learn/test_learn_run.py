"""``learn_from``'s pieces that need no training: the recipe presets, the work folder, where the labels come from,
and the device refusal that comes before anything loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from semdup.core.errors import ConfigError
from semdup.data.paths import semeval_train_files
from semdup.learn.learn_run import _labels, learn_from, recipe, work_dir_for
from semdup.training.learn.settings import LearnSettings


def test_the_minilm_recipe_is_the_default_and_overrides_apply() -> None:
    assert recipe() == LearnSettings()
    assert recipe("minilm", epochs=1.5, seed=None) == LearnSettings(epochs=1.5)
    mp = recipe("mpnet")
    assert (mp.base_encoder, mp.max_len, mp.freeze_layers, mp.epochs) == ("mpnet", 128, 8, 1.0)
    with pytest.raises(ValueError, match="accepted: minilm, mpnet"):
        recipe("bert")


def test_the_work_folder_sits_beside_the_candidate() -> None:
    assert work_dir_for("artifacts/learned/semeval") == Path("artifacts/learned/semeval.work")


def test_labels_come_from_a_name_a_path_or_an_index_field() -> None:
    named, name = _labels("semeval", None, None, None, "title", "body")
    assert named.supervision.report.queries == 280 and name == "semeval" and not named.exclude
    named, name = _labels("travel", None, None, None, "title", "body")
    assert named.exclude and name == "travel"  # its test split is never learned from
    named, _ = _labels(str(semeval_train_files()[1]), None, None, None, "title", "body")
    assert named.supervision.kind == "rerank" and not named.exclude and not named.corpus  # a path: all of it
    with pytest.raises(ValueError, match="give data"):
        _labels(None, None, "site", None, "title", "body")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused_before_the_labels_are_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sees no CUDA device"):
        learn_from("no-such-data-set", tmp_path / "out", device="cuda")  # the data name is never looked at
    assert not (tmp_path / "out").exists() and not work_dir_for(tmp_path / "out").exists()
