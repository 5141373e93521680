"""The bundled data sets as ``semdup learn`` takes them: each with its own published split, so test stays unseen.

An operator's labels are split by :func:`~semdup.data.supervision_split.split_supervision` (time or cluster). The
three bundled sets already have a protocol with a test side that every figure in the README is measured on; an
automatic split of all their links would train on test questions. So by name:

=============  =======================================  ==============================================
name           learned from                             judged on (the gate's held-out queries)
=============  =======================================  ==============================================
``semeval``    SemEval-2016 train parts 1 and 2         the official dev set (50 questions)
``travel``     the Travel dump's ``train`` split        its ``dev`` split (108 queries)
``askubuntu``  AskUbuntu's train pairs                  a cluster split of the train pairs
=============  =======================================  ==============================================

The test sides (SemEval test, Travel test, AskUbuntu test pairs) are never read here.

Example::

    named = named_supervision("semeval")
    named.split.report.line()   # "held out by the data set's own split: 50 of 317 queries, ..."
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from semdup.core.posts import Post
from semdup.data.supervision import Supervision, clusters, load_supervision, supervision_from_semeval
from semdup.data.supervision_split import LearnSplit, SplitReport

__all__ = ["LEARN_SETS", "NamedSupervision", "named_supervision"]

LEARN_SETS = ("semeval", "travel", "askubuntu")


@dataclass(frozen=True)
class NamedSupervision:
    """A bundled set's labels, the split to use (None: split automatically) and unlabelled posts for the IDF."""

    supervision: Supervision
    split: LearnSplit | None
    corpus: Sequence[Post] = ()


def _semeval() -> NamedSupervision:
    from semdup.data.paths import semeval_files, semeval_train_files
    from semdup.data.semeval import load_semeval_xml

    sup = supervision_from_semeval(semeval_train_files())
    dev = load_semeval_xml(*semeval_files("dev"), name="dev")
    informative = sum(1 for q in sup.data.questions if any(r.relevant for r in q.related))
    held = sum(1 for q in dev.questions if any(r.relevant for r in q.related))
    report = SplitReport("official", informative, held, len(sup.data.questions), len(dev.questions))
    posts = [q.post for q in dev.questions] + dev.related_posts()
    return NamedSupervision(sup, LearnSplit("rerank", sup.data, dev, report), posts)


def _travel() -> NamedSupervision:
    from semdup.data.paths import travel_dir
    from semdup.data.supervision import supervision_from_dump

    sup = supervision_from_dump(travel_dir())  # the labels' counts; its splits are put back below
    from semdup.data.stackexchange import load_stackexchange_dump

    dump = load_stackexchange_dump(travel_dir())
    sup = Supervision("retrieval", dump, sup.report)
    of = clusters(dump.duplicate_links)
    sides = {name: {q.post.id for q in dump.queries(name)} for name in ("train", "dev")}
    n_clusters = {name: len({of[q] for q in ids}) for name, ids in sides.items()}
    report = SplitReport("official", len(sides["train"]), len(sides["dev"]), n_clusters["train"], n_clusters["dev"])
    return NamedSupervision(sup, LearnSplit("retrieval", (dump, "train"), (dump, "dev"), report))


def named_supervision(name: str) -> NamedSupervision:
    """The bundled set ``name`` (see the module doc).

    Raises:
        ValueError: not one of :data:`LEARN_SETS`.
    """
    if name == "semeval":
        return _semeval()
    if name == "travel":
        return _travel()
    if name == "askubuntu":
        from semdup.data.paths import askubuntu_files

        return NamedSupervision(load_supervision(askubuntu_files()[0]), None)
    raise ValueError(f"unknown data set {name!r}; accepted: {', '.join(LEARN_SETS)} or a path")
