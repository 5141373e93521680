"""Per-data-set training recipes: which files train, which tune, which test, and how each is scored.

Torch-free. Each recipe follows the data set's official protocol (``shared/data/*/README.md``):

* ``semeval``: train = part 1 (JSONL) + part 2 (XML); early stopping on dev MAP; dev and test
  reported with the official measure; a duplicate threshold chosen on dev accuracy (for serving).
* ``travel``: train = duplicate links inside the train split (plus related links and BM25
  hard negatives); early stopping on dev MAP over the whole corpus; test reported once.
* ``askubuntu``: train pairs minus a held-out 20 % slice (by query id hash) that serves as dev
  (accuracy at its own best threshold); the final threshold is the one chosen on that held-out
  slice of the train file, applied to test (Bogdanova et al. 2015: threshold tuned on held-out data).

Example::

    recipe = build_recipe("travel", DataPaths.defaults("travel"), negatives=20, seed=0)
    train(settings, recipe.data, recipe.evaluate_dev, recipe.dev_metric, out, recipe.evaluate_final)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semdup.core.errors import ConfigError, DataError
from semdup.core.lexical_scores import LexicalIndex
from semdup.core.scoring import PostScorer
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
from semdup.data.paths import default_data_dir
from semdup.measures.fitting import best_threshold
from semdup.measures.protocols import eval_pairs, eval_semeval, eval_travel, pair_scores
from semdup.training.pairs import (
    TrainingData,
    pair_training_data,
    semeval_qa_pairs,
    semeval_training_data,
    split_held_out,
    travel_training_data,
)

__all__ = [
    "DATA_SETS",
    "DEFAULT_DATA_DIR",
    "DataPaths",
    "Recipe",
    "build_recipe",
    "RECIPE_DEFAULTS",
    "recipe_defaults",
]

logger = logging.getLogger(__name__)

DATA_SETS = ("semeval", "travel", "askubuntu")
DEFAULT_DATA_DIR = default_data_dir()  # SEMDUP_DATA_DIR, else shared/data beside the checkout
_SEMEVAL = "semeval2016-task3"
_OFFICIAL = "semeval2016-task3/official/SemEval2016-Task3-CQA-QL"


# Training settings chosen on a data set's dev split for one architecture, applied by ``semdup train``
# on top of the arch's ``train_defaults`` (command-line options still win). ``hparams`` merges
# into the model hyper-parameters. Each entry names the dev run that chose it (encoders/README.md).
RECIPE_DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {
    # Travel dev (108 queries), tuning runs I vs A-K in encoders/README.md: the whole post for the bag of
    # words (TF-IDF cosine at init: dev MAP 37.62 at 400 tokens vs 35.87 at 100), the CNN on the first
    # 100 tokens with frozen GloVe vectors (the embedding table is what overfits 1,570 groups), random
    # negatives as the paper (hardest of 20), dev every quarter epoch, β_dense × s chosen on dev,
    # Adam lr 3e-3 (dev MAP 42.20 vs 40.24 at 1e-3; seed 1 at 1e-3: 40.13). Round 2 (runs B0-B6 in
    # encoders/README.md) kept every setting: seeds 1/2 give 41.69/40.16; 50 negatives 39.77, term_lr
    # 3e-4 39.95, term_lr 0 39.89, BM25 negatives 40.36, 8 evals/epoch and a wider scale grid 42.20.
    ("bow-cnn", "travel"): {
        "lr": 3e-3,
        "max_tokens": 400,
        "epochs": 3,
        "evals_per_epoch": 4,
        "patience": 1,
        "dense_scales": (0.0, 0.1, 0.25, 0.5, 1.0),
        "lexical_negatives": 0,
        "related_negatives": False,
        "hparams": {"conv_max_tokens": 100, "freeze_embeddings": True},
    },
    # Travel dev, runs S1-S2 in encoders/README.md: 3 random 0-pairs per positive beside the 3 hard
    # ones (hard only: dev MAP 0.96), 100 tokens, lr 3e-3 (2.28 vs 0.54 at 1e-3). It still barely learns.
    ("scqa", "travel"): {
        "lr": 3e-3,
        "max_tokens": 100,
        "epochs": 6,
        "evals_per_epoch": 2,
        "patience": 3,
        "random_pair_negatives": 3,
    },
    # Travel dev: mean pooling MAP 15.82 vs 7.30 with the paper's sum (saturated tanh on long posts).
    ("cnn", "travel"): {
        "max_tokens": 100,
        "epochs": 4,
        "evals_per_epoch": 2,
        "patience": 1,
        "hparams": {"pooling": "mean"},
    },
}


def recipe_defaults(arch: str, data: str) -> dict[str, Any]:
    """The dev-chosen settings of (arch, data set): TrainSettings fields plus ``hparams`` (may be empty)."""
    got = RECIPE_DEFAULTS.get((arch, data), {})
    return {**got, "hparams": dict(got.get("hparams", {}))}


@dataclass(frozen=True)
class DataPaths:
    """Files of one data set: ``train`` (one or more), ``dev`` and ``test`` (may be None where derived)."""

    train: tuple[Path, ...]
    dev: Path | None = None
    test: Path | None = None

    @classmethod
    def defaults(cls, data: str, root: str | Path = DEFAULT_DATA_DIR) -> DataPaths:
        r = Path(root)
        if data == "semeval":
            return cls(
                (r / _SEMEVAL / "train-part1.pairs.jsonl", r / f"{_OFFICIAL}-train-part2.xml"),
                r / f"{_OFFICIAL}-dev.xml",
                r / f"{_OFFICIAL}-test-input.xml",
            )
        if data == "travel":
            return cls((r / "travel-stackexchange",), None, None)
        if data == "askubuntu":
            return cls(
                (r / "askubuntu-pairs" / "train.pairs.jsonl",), None, r / "askubuntu-pairs" / "test.pairs.jsonl"
            )
        raise ConfigError(f"unknown data set {data!r}; known: {DATA_SETS}")

    def override(self, train: Sequence[str] = (), dev: str | None = None, test: str | None = None) -> DataPaths:
        return DataPaths(
            tuple(Path(p) for p in train) or self.train,
            Path(dev) if dev else self.dev,
            Path(test) if test else self.test,
        )


@dataclass(frozen=True)
class Recipe:
    """Training data plus the dev and final evaluations of one data set."""

    data: TrainingData
    evaluate_dev: Callable[[PostScorer], Mapping[str, float]]
    dev_metric: str
    evaluate_final: Callable[[PostScorer], dict[str, Any]]
    extra_config: dict[str, Any]


_SKIP_TEST: list[bool] = [False]


class _test_skipped:  # noqa: N801 - used as a context manager
    """While active, the recipes' final evaluations leave test out (``--dev-only`` tuning runs)."""

    def __enter__(self) -> None:
        _SKIP_TEST[0] = True

    def __exit__(self, *exc: object) -> None:
        _SKIP_TEST[0] = False


def _test_or_skip(fn: Callable[[], Any]) -> Any:
    return None if _SKIP_TEST[0] else fn()


def _semeval_gold_path(xml: Path) -> Path:
    """The official gold file beside an XML (the test input's gold is named after ``-test.xml``)."""
    name = xml.name.replace("-test-input.xml", "-test.xml")
    return xml.with_name(name + ".subtaskB.relevancy")


def _load_semeval(path: Path, gold: bool) -> Any:
    from semdup.data import load_semeval_pairs_jsonl, load_semeval_xml

    if path.suffix == ".jsonl":
        return load_semeval_pairs_jsonl(path)
    rel = _semeval_gold_path(path)
    if gold and not rel.exists():
        raise DataError(f"no gold file {rel} beside {path}; SemEval dev/test need their .subtaskB.relevancy file")
    return load_semeval_xml(path, rel if rel.exists() else None)


def _semeval_recipe(paths: DataPaths, negatives: int, seed: int, qa_pairs: bool = False) -> Recipe:
    train_sets = [_load_semeval(p, gold=False) for p in paths.train]
    dev = _load_semeval(paths.dev, gold=True)
    test = _load_semeval(paths.test, gold=True)
    data = semeval_training_data(train_sets, negatives=negatives, seed=seed)
    if qa_pairs:  # SCQA's question–answer pairs (train-side comments) added to the pair losses' data
        qa = semeval_qa_pairs(train_sets, seed=seed)
        answers = tuple({p.candidate.id: p.candidate for p in qa}.values())
        summary = {**data.summary, "qa_pairs": len(qa), "qa_positive": sum(p.label > 0 for p in qa)}
        data = TrainingData(data.groups, data.pairs + qa, data.vocab_posts + answers, summary)

    def final(scorer: PostScorer) -> dict[str, Any]:
        from semdup.data import PostPair

        dev_pairs = [
            PostPair(q.post, r.post, bool(r.relevant), r.label or "") for q in dev.questions for r in q.related
        ]
        thr, acc = best_threshold(pair_scores(scorer, dev_pairs), [p.duplicate for p in dev_pairs])
        return {
            "dev": eval_semeval(scorer, dev),
            "test": _test_or_skip(lambda: eval_semeval(scorer, test)),
            "threshold": thr,
            "threshold_source": "dev accuracy",
            "dev_pair_accuracy": acc,
        }

    extra = {
        "data_set": "semeval",
        "data_paths": {"train": [str(p) for p in paths.train], "dev": str(paths.dev), "test": str(paths.test)},
    }
    return Recipe(data, lambda s: eval_semeval(s, dev), "MAP", final, extra)


def _travel_recipe(
    paths: DataPaths,
    negatives: int,
    seed: int,
    lexical_negatives: int,
    related_negatives: bool = True,
    random_pair_negatives: int = 0,
) -> Recipe:
    from semdup.data import load_stackexchange_dump

    dump = load_stackexchange_dump(paths.train[0])
    lex: dict[str, list[str]] = {}
    if lexical_negatives > 0:
        pipe = TextPipeline(TextPipelineSettings())
        index = LexicalIndex.build(pipe, dump.corpus(), kind="bm25")
        ids = sorted(
            {
                x
                for a, b in dump.duplicate_links
                for x in (a, b)
                if dump.splits.get(x) == "train" and dump.splits.get(a) == dump.splits.get(b) == "train"
            }
        )
        tops = index.top_k(pipe, [dump.posts[i] for i in ids], lexical_negatives)
        lex = dict(zip(ids, tops, strict=True))
    data = travel_training_data(
        dump,
        "train",
        negatives=negatives,
        lexical_negatives=lex,
        seed=seed,
        related_negatives=related_negatives,
        random_pair_negatives=random_pair_negatives,
    )

    def final(scorer: PostScorer) -> dict[str, Any]:
        test = _test_or_skip(lambda: eval_travel(scorer, dump, "test"))
        return {"dev": eval_travel(scorer, dump, "dev"), "test": test, "threshold": None}

    extra = {
        "data_set": "travel",
        "data_paths": {"dump": str(paths.train[0])},
        "lexical_negatives": lexical_negatives,
        "related_negatives": related_negatives,
    }
    if random_pair_negatives > 0:
        extra["random_pair_negatives"] = random_pair_negatives
    return Recipe(data, lambda s: eval_travel(s, dump, "dev"), "MAP", final, extra)


def _askubuntu_recipe(paths: DataPaths, negatives: int, seed: int) -> Recipe:
    from semdup.data import load_pairs_jsonl

    all_train = [p for path in paths.train for p in load_pairs_jsonl(path)]
    fit, held = split_held_out(all_train, key=lambda p: p.query.id, share=0.2)
    if not held or not fit:
        raise DataError(f"the AskUbuntu train file has too few pairs ({len(all_train)}) for a held-out dev slice")
    test = load_pairs_jsonl(paths.test)
    data = pair_training_data(fit, negatives=negatives, seed=seed)

    def final(scorer: PostScorer) -> dict[str, Any]:
        # The threshold is tuned on the held-out slice of the train file: on the fitted pairs the
        # scores are overconfident and a threshold chosen there does not carry over (Bogdanova et
        # al. tune it on held-out data too). Test is never looked at before this point.
        dev_eval = eval_pairs(scorer, held)
        thr = dev_eval["threshold"]
        return {
            "train": eval_pairs(scorer, all_train, thr),
            "dev": dev_eval,
            "test": _test_or_skip(lambda: eval_pairs(scorer, test, thr)),
            "threshold": thr,
            "threshold_source": "accuracy on the held-out 20% slice of the train file",
        }

    extra = {
        "data_set": "askubuntu",
        "data_paths": {"train": [str(p) for p in paths.train], "test": str(paths.test)},
        "dev_slice": {"share": 0.2, "pairs": len(held), "key": "crc32(dev:query.id)"},
    }
    return Recipe(data, lambda s: eval_pairs(s, held), "accuracy", final, extra)


def build_recipe(
    data: str,
    paths: DataPaths,
    negatives: int = 20,
    seed: int = 0,
    lexical_negatives: int = 30,
    qa_pairs: bool = False,
    report_test: bool = True,
    related_negatives: bool = True,
    random_pair_negatives: int = 0,
) -> Recipe:
    """The recipe of data set ``data`` (``semeval``, ``travel`` or ``askubuntu``) over ``paths``.

    ``qa_pairs`` (SemEval only) adds question–answer pairs from the training comments (SCQA).
    ``related_negatives`` (Travel) uses related links as negatives. ``random_pair_negatives``
    (Travel) adds that many random 0-pairs per positive for pair losses (SCQA's easy negatives).
    ``report_test=False`` (tuning runs) leaves test out of the final evaluation, so a setting can
    only be chosen on dev.
    """
    if data == "semeval":
        recipe = _semeval_recipe(paths, negatives, seed, qa_pairs)
    elif data == "travel":
        recipe = _travel_recipe(paths, negatives, seed, lexical_negatives, related_negatives, random_pair_negatives)
    elif data == "askubuntu":
        recipe = _askubuntu_recipe(paths, negatives, seed)
    else:
        raise ConfigError(f"unknown data set {data!r}; known: {DATA_SETS}")
    if report_test:
        return recipe

    def final_without_test(scorer: PostScorer) -> dict[str, Any]:
        with _test_skipped():
            out = recipe.evaluate_final(scorer)
        return {**out, "test": None, "test_skipped": "tuning run (--dev-only)"}

    return Recipe(recipe.data, recipe.evaluate_dev, recipe.dev_metric, final_without_test, recipe.extra_config)
