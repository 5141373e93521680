"""Loaders for the three real evaluation data sets, each raising ``DataError`` on bad input.

* SemEval-2016 Task 3 subtask B: ``load_semeval_xml``, ``load_relevancy``, ``load_semeval_pairs_jsonl``.
* AskUbuntu duplicate pairs (and SemEval part 1 as flat pairs): ``load_pairs_jsonl``.
* Stack Exchange dumps (Travel): ``load_stackexchange_dump`` and ``StackExchangeDump.queries``.
* Posts to index from any of these inputs, the format sniffed, a bad record skipped and named:
  ``read_post_input`` (``read_posts`` is its strict fold).
"""

from __future__ import annotations

from semdup.data.pairs import PAIR_LABELS, PostPair, load_pairs_jsonl
from semdup.data.posts_input import INPUT_FORMATS, read_post_input, read_posts, sniff_format
from semdup.data.semeval import (
    COMMENT_LABELS,
    RELQ_LABELS,
    Comment,
    OriginalQuestion,
    RelatedQuestion,
    SemEvalSet,
    load_relevancy,
    load_semeval_pairs_jsonl,
    load_semeval_xml,
)
from semdup.data.stackexchange import (
    SPLITS,
    RetrievalQuery,
    StackExchangeDump,
    load_stackexchange_dump,
)

__all__ = [
    "Comment",
    "RelatedQuestion",
    "OriginalQuestion",
    "SemEvalSet",
    "load_semeval_xml",
    "load_relevancy",
    "load_semeval_pairs_jsonl",
    "PostPair",
    "load_pairs_jsonl",
    "StackExchangeDump",
    "RetrievalQuery",
    "load_stackexchange_dump",
    "PAIR_LABELS",
    "RELQ_LABELS",
    "COMMENT_LABELS",
    "SPLITS",
    "read_posts",
    "read_post_input",
    "sniff_format",
    "INPUT_FORMATS",
]
