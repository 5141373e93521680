"""A Stack Exchange data dump (Posts.xml + PostLinks.xml + splits.tsv) and its retrieval protocol.

Protocol (``/work/shared/data/travel-stackexchange/README.md``, after dos Santos et al. 2015):
a query is a post of the split that is the ``PostId`` side of a duplicate link (``LinkTypeId=3``)
whose both ends are in Posts.xml; its relevant posts are every post joined to it by a duplicate
link in either direction (direct links, not the transitive cluster); the corpus is every question
except the query. Travel gives train 741, dev 108, test 231 queries.

Both XML files are stream-parsed, so a full multi-gigabyte dump loads in flat memory.

Example::

    >>> dump = load_stackexchange_dump("/work/shared/data/travel-stackexchange")
    >>> len(dump.posts), len(dump.queries("test"))
    (4919, 231)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from semdup.core.errors import DataError
from semdup.core.posts import Post
from semdup.data.reading import iter_xml_elements, read_utf8_lines, require_attr

__all__ = [
    "StackExchangeDump",
    "RetrievalQuery",
    "load_stackexchange_dump",
    "load_duplicate_links",
    "SPLITS",
    "DUPLICATE_LINK",
    "RELATED_LINK",
]

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
DUPLICATE_LINK = "3"
RELATED_LINK = "1"
QUESTION_TYPE = "1"
POST_FIELDS = ("CreationDate", "OwnerUserId", "Tags")  # the question attributes kept beside the text


@dataclass(frozen=True)
class RetrievalQuery:
    """A query post and the ids of the posts that count as its duplicates."""

    post: Post
    relevant: frozenset[str]


@dataclass(frozen=True)
class StackExchangeDump:
    """The questions of a dump, its duplicate and related links, and the split of each post.

    Attributes:
        posts: question posts (PostTypeId=1) by id, ``body`` as the dump's raw HTML.
        duplicate_links: (PostId, RelatedPostId) of LinkTypeId=3 links whose both ends are present.
        related_links: the same for LinkTypeId=1 (related, not duplicate: hard negatives).
        skipped_links: duplicate/related links naming a post absent from Posts.xml (counted, unused).
        splits: post id -> train / dev / test, from splits.tsv when present.
        skipped_posts: questions with neither title nor body (counted, unused).
        self_links: duplicate/related links from a post to itself (counted, unused).
        other_posts: rows of Posts.xml that are not questions (answers, wiki...), not loaded.
        link_dates: (PostId, RelatedPostId) of a kept duplicate link -> its ``CreationDate`` (ISO 8601 text as the
            dump writes it), for links that carry one: when a moderator closed the question, what a split by
            time orders by.
        post_fields: :data:`POST_FIELDS` attribute -> post id -> its value, for the questions that carry it (when
            it was asked, who asked it, its tags): what else may separate future posts from past ones.
    """

    posts: dict[str, Post]
    duplicate_links: tuple[tuple[str, str], ...]
    related_links: tuple[tuple[str, str], ...]
    skipped_links: int
    splits: dict[str, str]
    skipped_posts: int = 0
    self_links: int = 0
    other_posts: int = 0
    link_dates: dict[tuple[str, str], str] = field(default_factory=dict, compare=False, repr=False)
    post_fields: dict[str, dict[str, str]] = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def _neighbours(self) -> dict[str, frozenset[str]]:
        table: dict[str, set[str]] = {}
        for a, b in self.duplicate_links:
            table.setdefault(a, set()).add(b)
            table.setdefault(b, set()).add(a)
        return {k: frozenset(v) for k, v in table.items()}

    def duplicates_of(self, post_id: str) -> frozenset[str]:
        """Ids joined to ``post_id`` by a duplicate link, in either direction."""
        return self._neighbours.get(post_id, frozenset())

    def queries(self, split: str) -> list[RetrievalQuery]:
        """The README protocol's queries of one split, in the order of their first duplicate link.

        Args:
            split: one of ``train``, ``dev``, ``test``.

        Raises:
            ValueError: an unknown split name.
            DataError: the dump was loaded without splits.tsv.
        """
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}; accepted values: {', '.join(SPLITS)}.")
        if not self.splits:
            raise DataError("This dump was loaded without splits.tsv; pass splits_path to load_stackexchange_dump.")
        out: list[RetrievalQuery] = []
        seen: set[str] = set()
        for query_id, _ in self.duplicate_links:
            if query_id in seen or self.splits.get(query_id) != split:
                continue
            seen.add(query_id)
            out.append(RetrievalQuery(post=self.posts[query_id], relevant=self.duplicates_of(query_id)))
        return out

    def corpus(self) -> list[Post]:
        """Every loaded question, in Posts.xml order: what each query is searched against."""
        return list(self.posts.values())


def _load_posts(path: Path) -> tuple[dict[str, Post], int, int, dict[str, dict[str, str]]]:
    posts: dict[str, Post] = {}
    fields: dict[str, dict[str, str]] = {name: {} for name in POST_FIELDS}
    skipped = other = 0
    for row in iter_xml_elements(path, "row", "a Stack Exchange Posts.xml (<posts><row Id=... PostTypeId=... />)"):
        post_id = require_attr(row, "Id", path, "")
        if row.get("PostTypeId") != QUESTION_TYPE:
            other += 1
            continue
        if post_id in posts:
            raise DataError(f"{path}: post Id {post_id} appears twice; expected unique post ids.")
        title, body = row.get("Title") or "", row.get("Body") or ""
        if not title.strip() and not body.strip():
            skipped += 1
            logger.debug("Post %s has neither title nor body; skipped", post_id)
            continue
        posts[post_id] = Post(id=post_id, title=title, body=body)
        for name in POST_FIELDS:
            value = row.get(name)
            if value:
                fields[name][post_id] = value
    if skipped:
        logger.warning(
            "%s: %d questions with neither title nor body were skipped (counted in skipped_posts).", path, skipped
        )
    if not posts:
        raise DataError(f"{path}: holds no usable question (PostTypeId=1 with a title or body).")
    return posts, skipped, other, {name: values for name, values in fields.items() if values}


class _AnyPost:
    """Every id counts as present: the links of a PostLinks.xml read without its Posts.xml."""

    def __contains__(self, post_id: object) -> bool:
        return True


def load_duplicate_links(path: str | Path) -> list[tuple[str, str]]:
    """The ``(PostId, RelatedPostId)`` duplicate links (``LinkTypeId=3``) of a PostLinks.xml, in file order, each
    once, a post linked to itself left out; whether the posts exist is the caller's to check.

    Raises:
        DataError: a missing, empty, non-UTF-8 or malformed file, a row without PostId / RelatedPostId.
    """
    dup, _, _, _, _ = _load_links(Path(path), _AnyPost())
    return dup


def _load_links(
    path: Path, posts: dict[str, Post] | _AnyPost
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], int, int, dict[tuple[str, str], str]]:
    dup: dict[tuple[str, str], None] = {}
    dates: dict[tuple[str, str], str] = {}
    rel: dict[tuple[str, str], None] = {}
    skipped = self_links = repeats = 0
    for row in iter_xml_elements(path, "row", "a Stack Exchange PostLinks.xml (<postlinks><row PostId=... />)"):
        link_type = require_attr(row, "LinkTypeId", path, f"(link Id {row.get('Id')})")
        if link_type not in (DUPLICATE_LINK, RELATED_LINK):
            continue
        a = require_attr(row, "PostId", path, f"(link Id {row.get('Id')})")
        b = require_attr(row, "RelatedPostId", path, f"(link Id {row.get('Id')})")
        if a not in posts or b not in posts:
            skipped += 1
            continue
        if a == b:
            self_links += 1
            continue
        target = dup if link_type == DUPLICATE_LINK else rel
        if (a, b) in target:
            repeats += 1
        target[(a, b)] = None
        when = row.get("CreationDate")
        if link_type == DUPLICATE_LINK and when and (a, b) not in dates:
            dates[(a, b)] = when
    if skipped:
        logger.info(
            "%s: %d links name a post absent from Posts.xml; skipped (counted in skipped_links).", path, skipped
        )
    if self_links:
        logger.warning("%s: %d links join a post to itself; skipped (counted in self_links).", path, self_links)
    if repeats:
        logger.info("%s: %d links repeat an earlier (PostId, RelatedPostId, LinkTypeId); kept once.", path, repeats)
    return list(dup), list(rel), skipped, self_links, dates


def _load_splits(path: Path) -> dict[str, str]:
    fmt = "'post_id TAB split' lines (split = train, dev or test) under a 'post_id<TAB>split' header"
    out: dict[str, str] = {}
    for line_no, text in read_utf8_lines(path, fmt):
        if not text.strip() or (line_no == 1 and text.split("\t")[0] == "post_id"):
            continue
        fields = text.split("\t")
        if len(fields) != 2 or fields[1] not in SPLITS:
            raise DataError(f"{path}: line {line_no}: found {text[:80]!r}; expected {fmt}.")
        post_id, split = fields
        if out.get(post_id, split) != split:
            raise DataError(f"{path}: line {line_no}: post {post_id} is put in both {out[post_id]} and {split}.")
        out[post_id] = split
    return out


def load_stackexchange_dump(dump_dir: str | Path, splits_path: str | Path | None = None) -> StackExchangeDump:
    """Load a dump directory holding ``Posts.xml`` and ``PostLinks.xml`` (and ``splits.tsv``).

    Args:
        dump_dir: the directory of the dump.
        splits_path: the split file; defaults to ``dump_dir/splits.tsv`` when that exists, else
            no splits (``queries`` then raises).

    Raises:
        DataError: a missing, empty, non-UTF-8 or malformed file, a row without Id / LinkTypeId,
            a repeated post id, or a bad splits line.
    """
    d = Path(dump_dir)
    if not d.is_dir():
        raise DataError(
            f"{d}: not a directory; expected a Stack Exchange dump directory with Posts.xml and PostLinks.xml."
        )
    posts, skipped_posts, other, post_fields = _load_posts(d / "Posts.xml")
    dup, rel, skipped_links, self_links, link_dates = _load_links(d / "PostLinks.xml", posts)
    split_file = Path(splits_path) if splits_path is not None else d / "splits.tsv"
    splits: dict[str, str] = {}
    if splits_path is not None or split_file.exists():
        splits = _load_splits(split_file)
        absent = sum(1 for p in splits if p not in posts)
        if absent:
            logger.warning(
                "%s: %d split entries name posts absent from Posts.xml; they cannot be queries.", split_file, absent
            )
    dump = StackExchangeDump(
        posts=posts,
        duplicate_links=tuple(dup),
        related_links=tuple(rel),
        skipped_links=skipped_links,
        splits=splits,
        skipped_posts=skipped_posts,
        self_links=self_links,
        other_posts=other,
        link_dates=link_dates,
        post_fields=post_fields,
    )
    logger.info(
        "Loaded %s: %d questions (%d skipped, %d non-question rows), %d duplicate + %d related links (%d skipped)",
        d,
        len(posts),
        skipped_posts,
        other,
        len(dup),
        len(rel),
        skipped_links,
    )
    return dump
