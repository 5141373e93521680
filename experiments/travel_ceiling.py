"""The lexical starting point of BOW-CNN on Travel: numpy TF-IDF / BM25 at several token cuts, on dev.

BOW-CNN's bag-of-words path at initialisation *is* TF-IDF cosine (t = IDF, dos Santos et al. 2015
§3.2), so TF-IDF cosine of the same pipeline at the same ``max_tokens`` is the figure training
starts from. This prints that figure per cut, on dev only (choices are made on dev; test is
looked at once, for the chosen setting, by ``semdup train``). Torch-free.

Example::

    python -m experiments.travel_ceiling --max-tokens 100 200 400 800
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from semdup.core.lexical_scores import LexicalIndex
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
from semdup.data.paths import default_data_dir
from semdup.measures.protocols import travel_scores

__all__ = ["lexical_dev_scores", "main"]

logger = logging.getLogger(__name__)


def lexical_dev_scores(dump: object, max_tokens: int, kind: str, split: str = "dev") -> dict[str, float]:
    """Travel protocol figures of a numpy lexical ranking (title + body cut at ``max_tokens``)."""
    pipe = TextPipeline(TextPipelineSettings(max_tokens=max_tokens))
    corpus = dump.corpus()  # type: ignore[attr-defined]
    queries = dump.queries(split)  # type: ignore[attr-defined]
    index = LexicalIndex.build(pipe, corpus, kind=kind)
    return travel_scores(index.score_matrix(pipe, [q.post for q in queries]), queries, index.ids)


def main(argv: Sequence[str] | None = None) -> None:
    """Print one JSON line per (kind, max_tokens) with the dev figures."""
    from semdup.data import load_stackexchange_dump

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", default=default_data_dir() / "travel-stackexchange", type=Path)
    ap.add_argument("--max-tokens", type=int, nargs="+", default=[100, 200, 400, 800])
    ap.add_argument("--kinds", nargs="+", default=["tfidf", "bm25"])
    ap.add_argument(
        "--split", default="dev", choices=["train", "dev", "test"], help="test: for the report only, never to choose"
    )
    args = ap.parse_args(argv)
    dump = load_stackexchange_dump(args.dump)
    for kind in args.kinds:
        for n in args.max_tokens:
            figs = lexical_dev_scores(dump, n, kind, args.split)
            row = {"kind": kind, "max_tokens": n, "split": args.split}
            row.update({k: round(v, 2) for k, v in figs.items()})
            print(json.dumps(row))  # noqa: T201 - command-line entry point


if __name__ == "__main__":
    main()
