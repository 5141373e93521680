"""The bundled data sets as ``semdup learn`` takes them: every labelled query outside the set's official test side.

An operator's labels are all learned from and judged on, fold by fold (:mod:`semdup.data.learn_folds`). The three
bundled sets have a published test side that every README figure is measured on, so it is left out here and read
only by ``semdup eval``, once:

=============  ============================================================  ==============================
name           labelled queries learned from and judged out of fold          never read
=============  ============================================================  ==============================
``semeval``    SemEval-2016 train parts 1 and 2 + dev (280 originals with    the 2016 test set
               a relevant candidate)
``travel``     the Travel dump's links outside its ``test`` split            its ``test`` split's clusters
``askubuntu``  AskUbuntu's 715 train pairs                                   its test pairs
=============  ============================================================  ==============================

Example::

    named = named_supervision("semeval")
    named.supervision.report.queries, len(named.exclude)   # (280, 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from semdup.core.posts import Post
from semdup.data.supervision import Supervision, load_supervision, supervision_from_dump, supervision_from_semeval

__all__ = ["LEARN_SETS", "NamedSupervision", "named_supervision"]

LEARN_SETS = ("semeval", "travel", "askubuntu")


@dataclass(frozen=True)
class NamedSupervision:
    """A bundled set's labels, the posts never to use (its test side) and unlabelled posts for the IDF."""

    supervision: Supervision
    exclude: frozenset[str] = frozenset()
    corpus: Sequence[Post] = field(default=())


def named_supervision(name: str) -> NamedSupervision:
    """The bundled set ``name`` (see the module doc).

    Raises:
        ValueError: not one of :data:`LEARN_SETS`.
    """
    from semdup.data.paths import askubuntu_files, semeval_files, semeval_train_files, travel_dir

    if name == "semeval":
        return NamedSupervision(supervision_from_semeval([*semeval_train_files(), semeval_files("dev")[0]]))
    if name == "travel":
        from semdup.data.stackexchange import load_stackexchange_dump

        splits = load_stackexchange_dump(travel_dir()).splits  # supervision_from_dump drops the dump's own split
        return NamedSupervision(supervision_from_dump(travel_dir()),
                                frozenset(pid for pid, s in splits.items() if s == "test"))
    if name == "askubuntu":
        return NamedSupervision(load_supervision(askubuntu_files()[0]))
    raise ValueError(f"unknown data set {name!r}; accepted: {', '.join(LEARN_SETS)} or a path")
