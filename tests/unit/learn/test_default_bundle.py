"""The hybrid default: the fusion grid on toy groups, and a bundle fitted on real AskUbuntu pairs (library and CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from semdup.bundle import Bundle, BundleScorer
from semdup.cli import cli
from semdup.core.errors import ConfigError
from semdup.core.scoring import bow_matrix, cosine_rows, title_posts
from semdup.data import load_pairs_jsonl
from semdup.data.paths import askubuntu_files
from semdup.export.base_encoder_bundle import export_base_encoder
from semdup.export.parity import sample_posts
from semdup.learn.default_bundle import fit_default, idf_pipeline
from semdup.learn.fusion_fit import Group, choose_fusion, group_scores
from semdup.measures.fitting import best_threshold

N_PAIRS = 16


def _toy_groups(informative: str, n: int = 20, seed: int = 0) -> tuple[list[Group], dict[str, str]]:
    """Groups of 5 candidates where only ``informative`` ranks the relevant one first; the others are noise."""
    rng = np.random.default_rng(seed)
    groups, relevant = [], {}
    for i in range(n):
        comps = {name: rng.uniform(0.0, 0.3, 5) for name in ("cos_bow", "cos_dense", "lexical")}
        comps[informative][2] = 1.0  # candidate 2 is the duplicate
        groups.append(Group(f"q{i}", tuple(f"q{i}-c{j}" for j in range(5)), **comps))
        relevant[f"q{i}"] = f"q{i}-c2"
    return groups, relevant


def _top1(relevant: dict[str, str]):
    return lambda preds: float(np.mean([max(s, key=s.__getitem__) == relevant[q] for q, s in preds.items()]))


@pytest.mark.parametrize("informative, weight", [("cos_bow", "beta_bow"), ("lexical", "alpha")])
def test_grid_gives_weight_to_the_informative_component(informative: str, weight: str) -> None:
    groups, relevant = _toy_groups(informative)
    fit = choose_fusion(groups, _top1(relevant), "Acc@1")
    assert fit.dev == 1.0
    assert fit.fusion[weight] > 0 and fit.fusion["beta_dense"] == 1.0
    baseline = _top1(relevant)(group_scores(groups, {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}))
    assert baseline < 0.5  # dense alone is noise here: the fit had something to recover


def test_grid_keeps_dense_alone_when_the_rest_is_noise() -> None:
    groups, relevant = _toy_groups("cos_dense")
    fit = choose_fusion(groups, _top1(relevant), "Acc@1")
    assert fit.fusion == {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0} and fit.dev == 1.0
    assert len(fit.grid) == 81


def test_group_refuses_components_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="cos_dense has shape"):
        Group("q", ("a", "b"), np.zeros(2), np.zeros(3), np.zeros(2))


@pytest.fixture(scope="module")
def base_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(2)
    out = tmp_path_factory.mktemp("base") / "minilm"
    return export_base_encoder("minilm", out, parity_posts=sample_posts(4), max_len=64).bundle_dir


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first real AskUbuntu train pairs, both labels present."""
    lines = askubuntu_files()[0].read_text(encoding="utf-8").splitlines()[:N_PAIRS]
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    labels = {p.duplicate for p in load_pairs_jsonl(path)}
    assert labels == {True, False}
    return path


def test_fitted_bundle_loads_and_scores_as_bundle_scorer(base_bundle: Path, pairs_file: Path, tmp_path: Path) -> None:
    fit = fit_default(base_bundle, str(pairs_file), tmp_path / "default")
    bundle = Bundle.load(tmp_path / "default")
    assert bundle.version == fit.version and bundle.arch == "hybrid-minilm"
    assert bundle.fusion == fit.fusion and bundle.threshold == pytest.approx(fit.threshold)
    assert bundle.manifest["default_fit"]["dev"] == pytest.approx(fit.dev)

    pairs = load_pairs_jsonl(pairs_file)
    base = Bundle.load(base_bundle)
    pipeline, idf = idf_pipeline(base, [p for pair in pairs for p in (pair.query, pair.candidate)])
    np.testing.assert_array_equal(bundle.term_weights, idf)
    assert bundle.pipeline.vocab.itos == pipeline.vocab.itos

    scorer = BundleScorer(bundle)
    got = np.array([scorer.score(p.query, [p.candidate])[0] for p in pairs])
    q, c = [p.query for p in pairs], [p.candidate for p in pairs]
    cos_dense = cosine_rows(base.encode_dense(q), base.encode_dense(c))
    cos_bow = np.asarray(bow_matrix(pipeline, q, idf).multiply(bow_matrix(pipeline, c, idf)).sum(axis=1)).ravel()
    at, titles = title_posts([*q, *c])
    t = np.zeros((2 * len(pairs), base.dimension))
    t[at] = base.encode_dense(titles)
    cos_title = np.sum(t[: len(pairs)] * t[len(pairs) :], axis=1)
    want = fit.fusion["beta_bow"] * cos_bow + fit.fusion["beta_dense"] * cos_dense
    want += fit.fusion.get("beta_title", 0.0) * cos_title
    np.testing.assert_allclose(got, want, atol=1e-5)
    # the dev figure is the scorer's own accuracy at the stored threshold
    labels = [p.duplicate for p in pairs]
    assert best_threshold(got, labels)[1] == pytest.approx(fit.dev, abs=1e-6)


def test_cli_fits_and_prints_the_bundle(base_bundle: Path, pairs_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli-default"
    result = CliRunner().invoke(cli, ["fit-default", "--base-bundle", str(base_bundle), "--data", str(pairs_file),
                                      "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    bundle = Bundle.load(out)
    assert printed["version"] == bundle.version and printed["fusion"] == bundle.fusion
    assert printed["fit_queries"] == N_PAIRS and printed["vocab_size"] == len(bundle.pipeline.vocab)

    bad = CliRunner().invoke(cli, ["fit-default", "--base-bundle", str(base_bundle), "--data", "nowhere",
                                   "--out", str(tmp_path / "x")])
    # a ConfigError, which semdup.cli.main prints as one "Error: ..." line with exit 1
    assert isinstance(bad.exception, ConfigError) and "unknown fit data 'nowhere'" in str(bad.exception)


def test_int8_auto_ships_int8_only_within_the_allowed_dev_drop(base_bundle: Path, pairs_file: Path,
                                                                tmp_path: Path) -> None:
    from semdup.bundle.bundle import ENCODER_FILE, read_bundle_files
    from semdup.learn.default_bundle import INT8_MAX_DROP

    fp32 = fit_default(base_bundle, str(pairs_file), tmp_path / "fp32")
    auto = fit_default(base_bundle, str(pairs_file), tmp_path / "auto", int8="auto")
    q = auto.quantization
    assert q is not None and q["mode"] == "int8-channel" and "per_channel=True" in q["method"]
    assert q["dev_fp32"] == pytest.approx(fp32.dev)  # the fp32 candidate is the plain fit
    assert q["change"] == pytest.approx(q["dev_int8"] - q["dev_fp32"])
    assert q["chosen"] == (q["dev_fp32"] - q["dev_int8"] <= INT8_MAX_DROP)
    bundle = Bundle.load(tmp_path / "auto")
    assert bundle.manifest["quantization"] == q
    shipped = read_bundle_files(tmp_path / "auto")[ENCODER_FILE]
    base_encoder = read_bundle_files(base_bundle)[ENCODER_FILE]
    assert (shipped != base_encoder) == q["chosen"]
    assert auto.dev == pytest.approx(q["dev_int8"] if q["chosen"] else q["dev_fp32"])
    assert "quantization" not in Bundle.load(tmp_path / "fp32").manifest  # off: the bundle as before
    with pytest.raises(ValueError, match="accepted: off, auto"):
        fit_default(base_bundle, str(pairs_file), tmp_path / "x", int8="always")
