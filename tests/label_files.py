"""Small label files written by tests: a Stack Exchange dump folder and a JSONL of labelled pairs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path


def post_row(i: int) -> dict[str, str]:
    return {"id": str(i), "title": f"title {i}", "body": f"body {i}"}


def write_dump(tmp: Path, n_pairs: int = 30, dated: bool = True, one_date: bool = False,
               owner: Callable[[int], int] | None = None, asked: bool = False, tag: Callable[[int], str] | None = None
               ) -> Path:
    """Pairs (2k+1 -> 2k), pair k closed on day k (``one_date``: all on one day, as an export that stamps them at
    once), plus a link to a missing post, a self link and a related link. Questions may carry ``OwnerUserId`` =
    ``owner(i)``, a ``CreationDate`` (``asked``: question i asked in hour i of 2013-06-01... by its id) and ``Tags``
    = ``<tag(i)><common>``."""
    d = tmp / "dump"
    d.mkdir(parents=True)

    def extra(i: int) -> str:
        out = f' OwnerUserId="{owner(i)}"' if owner else ""
        out += f' CreationDate="2013-06-{1 + i // 24:02d}T{i % 24:02d}:00:00.000"' if asked else ""
        return out + (f' Tags="&lt;{tag(i)}&gt;&lt;common&gt;"' if tag else "")

    rows = "".join(f'<row Id="{i}" PostTypeId="1" Title="question {i}" Body="text {i}"{extra(i)} />'
                   for i in range(2 * n_pairs))
    (d / "Posts.xml").write_text(f"<posts>{rows}</posts>", encoding="utf-8")
    links = []
    for k in range(n_pairs):
        day = 1 if one_date else k + 1
        date = f' CreationDate="2014-{1 + (day - 1) // 28:02d}-{1 + (day - 1) % 28:02d}T10:00:00.000"' if dated else ""
        links.append(f'<row Id="{k}"{date} PostId="{2 * k + 1}" RelatedPostId="{2 * k}" LinkTypeId="3" />')
    links.append('<row Id="900" PostId="1" RelatedPostId="9999" LinkTypeId="3" />')  # a post not in the dump
    links.append('<row Id="901" PostId="3" RelatedPostId="3" LinkTypeId="3" />')  # a self link
    links.append('<row Id="902" PostId="1" RelatedPostId="5" LinkTypeId="1" />')  # related: a hard negative
    (d / "PostLinks.xml").write_text(f"<postlinks>{''.join(links)}</postlinks>", encoding="utf-8")
    return d


def write_pairs(tmp: Path, rows: list[tuple[int, int, str]]) -> Path:
    path = tmp / "pairs.jsonl"
    path.write_text("".join(json.dumps({"query": post_row(q), "candidate": post_row(c), "label": lab}) + "\n"
                            for q, c, lab in rows), encoding="utf-8")
    return path
