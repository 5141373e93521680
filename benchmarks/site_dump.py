"""A bigger, realistic Stack Exchange site for ``semdup learn``: thousands of real duplicate links (issue #33).

Run from the repository root::

    python -m benchmarks.site_dump --out artifacts/site-dump
    semdup learn --data artifacts/site-dump --out artifacts/learned/site --budget 15m

No single site we have holds thousands of duplicate links (Travel has 1,142), so this one is three real
communities in one dump, each link as its moderators or annotators made it, every official test side left out
(nothing any README figure is measured on is learned from here):

=============  ==========================================================================================
Travel         every question outside the test split's clusters, with its duplicate (``LinkTypeId=3``) and
               related (``1``) links and their ``CreationDate`` (when the moderator closed the question)
SemEval-2016   train parts 1 and 2 and dev: each original question and its related questions;
               ``PerfectMatch`` / ``Relevant`` → a duplicate link (original → related), ``Irrelevant`` → a
               related link; the XML files' related questions keep their ``CreationDate`` and
               ``OwnerUserId`` (part 1 came as pairs, without them)
AskUbuntu      the 715 train pairs' questions; each duplicate pair a duplicate link (a post of a test pair is
               left out with its pairs)
=============  ==========================================================================================

Ids are offset by source (Travel + 1,000,000; AskUbuntu 2,000,000 and SemEval 3,000,000 + the order of
appearance: their own ids are not numbers) and ``sources.tsv`` maps each back. The files are written in the
official dump format, in a fixed order: the same bytes on every run. Only some links and posts carry dates or askers, so ``semdup learn`` cuts
this site by duplicate cluster and prints why not by time or author (:mod:`semdup.data.learn_folds`).

The figures of a run (links, phases, decision) are in docs/results.md (issue #33).
"""

from __future__ import annotations

import argparse
import json
import logging
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import quoteattr

logger = logging.getLogger(__name__)

TRAVEL, ASKUBUNTU, SEMEVAL = 1_000_000, 2_000_000, 3_000_000
RELEVANT = {"PerfectMatch": True, "Relevant": True, "Irrelevant": False}


@dataclass
class Site:
    """The dump being built: questions (id -> attributes), links (PostId, RelatedPostId, type, date), sources."""

    posts: dict[int, dict[str, str]] = field(default_factory=dict)
    links: list[tuple[int, int, str, str]] = field(default_factory=list)
    sources: dict[int, tuple[str, str]] = field(default_factory=dict)

    def post(self, new_id: int, source: str, old_id: str, title: str, body: str, **extra: str) -> None:
        if new_id in self.posts:
            return
        self.posts[new_id] = {"Title": title, "Body": body, **{k: v for k, v in extra.items() if v}}
        self.sources[new_id] = (source, old_id)

    def counts(self) -> dict[str, int]:
        dup = sum(1 for *_, t, _ in self.links if t == "3")
        return {"questions": len(self.posts), "duplicate_links": dup, "related_links": len(self.links) - dup}


def _travel(site: Site, folder: Path) -> None:
    splits = dict(line.split("\t") for line in (folder / "splits.tsv").read_text(encoding="utf-8").split("\n")[1:]
                  if line.strip())
    test = {pid for pid, s in splits.items() if s.strip() == "test"}
    kept: set[str] = set()
    for _, row in ET.iterparse(folder / "Posts.xml"):
        if row.tag == "row" and row.get("PostTypeId") == "1" and row.get("Id") not in test:
            site.post(TRAVEL + int(row.get("Id", "0")), "travel", row.get("Id", ""), row.get("Title") or "",
                      row.get("Body") or "")
            kept.add(row.get("Id", ""))
        row.clear()
    for _, row in ET.iterparse(folder / "PostLinks.xml"):
        if row.tag == "row" and row.get("LinkTypeId") in ("1", "3"):
            a, b = row.get("PostId", ""), row.get("RelatedPostId", "")
            if a in kept and b in kept and a != b:
                site.links.append((TRAVEL + int(a), TRAVEL + int(b), row.get("LinkTypeId", ""),
                                   row.get("CreationDate", "")))
        row.clear()


def _semeval_xml(path: Path) -> Iterable[tuple[dict[str, str], dict[str, str]]]:
    """(original, related) of each thread: ids, text, label, date and asker where the XML has them."""
    for org in ET.parse(path).getroot().iter("OrgQuestion"):
        o = {"id": org.get("ORGQ_ID", ""), "title": org.findtext("OrgQSubject") or "",
             "body": org.findtext("OrgQBody") or ""}
        for rel in org.iter("RelQuestion"):
            yield o, {"id": rel.get("RELQ_ID", ""), "title": rel.findtext("RelQSubject") or "",
                      "body": rel.findtext("RelQBody") or "", "label": rel.get("RELQ_RELEVANCE2ORGQ", ""),
                      "date": (rel.get("RELQ_DATE") or "").replace(" ", "T"), "owner": rel.get("RELQ_USERID") or ""}


def _semeval_jsonl(path: Path) -> Iterable[tuple[dict[str, str], dict[str, str]]]:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            yield obj["query"], {**obj["candidate"], "label": obj["label"], "date": "", "owner": ""}


def _semeval(site: Site, folder: Path) -> None:
    ids: dict[str, int] = {}

    def new_id(old: str) -> int:
        return ids.setdefault(old, SEMEVAL + len(ids))

    official = folder / "official"
    for pairs in (_semeval_jsonl(folder / "train-part1.pairs.jsonl"),
                  _semeval_xml(official / "SemEval2016-Task3-CQA-QL-train-part2.xml"),
                  _semeval_xml(official / "SemEval2016-Task3-CQA-QL-dev.xml")):
        for o, r in pairs:
            if r["label"] not in RELEVANT:
                continue  # an unlabelled candidate says nothing
            a, b = new_id(o["id"]), new_id(r["id"])
            site.post(a, "semeval", o["id"], o["title"], o["body"])
            site.post(b, "semeval", r["id"], r["title"], r["body"], CreationDate=r["date"], OwnerUserId=r["owner"])
            site.links.append((a, b, "3" if RELEVANT[r["label"]] else "1", ""))


def _askubuntu(site: Site, folder: Path) -> None:
    def rows(name: str) -> list[dict]:
        return [json.loads(x) for x in (folder / name).read_text(encoding="utf-8").splitlines() if x.strip()]

    ids: dict[str, int] = {}
    test = {str(p[side]["id"]) for p in rows("test.pairs.jsonl") for side in ("query", "candidate")}
    for p in rows("train.pairs.jsonl"):
        q, c = p["query"], p["candidate"]
        if {str(q["id"]), str(c["id"])} & test or str(q["id"]) == str(c["id"]):
            continue
        a, b = (ids.setdefault(str(x["id"]), ASKUBUNTU + len(ids)) for x in (q, c))
        site.post(a, "askubuntu", str(q["id"]), q.get("title") or "", q.get("body") or "")
        site.post(b, "askubuntu", str(c["id"]), c.get("title") or "", c.get("body") or "")
        if p["label"] == "duplicate":
            site.links.append((a, b, "3", ""))


def build_site(data_dir: Path) -> Site:
    """The site from the shared data folder (``travel-stackexchange``, ``semeval2016-task3``,
    ``askubuntu-pairs``)."""
    site = Site()
    _travel(site, data_dir / "travel-stackexchange")
    _semeval(site, data_dir / "semeval2016-task3")
    _askubuntu(site, data_dir / "askubuntu-pairs")
    return site


def _attrs(items: Sequence[tuple[str, str]]) -> str:
    return " ".join(f"{k}={quoteattr(v)}" for k, v in items)


def write_site(site: Site, out: Path) -> dict[str, int]:
    """Posts.xml, PostLinks.xml and sources.tsv in ``out`` (replaced); returns the counts."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "Posts.xml").open("w", encoding="utf-8") as fh:
        fh.write('<?xml version="1.0" encoding="utf-8"?>\n<posts>\n')
        for pid in sorted(site.posts):
            attrs = site.posts[pid]
            fields = [("Id", str(pid)), ("PostTypeId", "1"), *((k, attrs[k]) for k in ("CreationDate", "OwnerUserId")
                                                                 if k in attrs),
                      ("Title", attrs["Title"]), ("Body", attrs["Body"])]
            fh.write(f"  <row {_attrs(fields)} />\n")
        fh.write("</posts>\n")
    seen: set[tuple[int, int, str]] = set()
    with (out / "PostLinks.xml").open("w", encoding="utf-8") as fh:
        fh.write('<?xml version="1.0" encoding="utf-8"?>\n<postlinks>\n')
        for n, (a, b, kind, date) in enumerate(sorted(site.links, key=lambda x: (x[3] or "~", x[0], x[1], x[2]))):
            if (a, b, kind) in seen:
                continue
            seen.add((a, b, kind))
            fields = [("Id", str(n + 1)), *((("CreationDate", date),) if date else ()), ("PostId", str(a)),
                      ("RelatedPostId", str(b)), ("LinkTypeId", kind)]
            fh.write(f"  <row {_attrs(fields)} />\n")
        fh.write("</postlinks>\n")
    (out / "sources.tsv").write_text("post_id\tsource\tsource_id\n" + "".join(
        f"{pid}\t{s}\t{old}\n" for pid, (s, old) in sorted(site.sources.items())), encoding="utf-8")
    return site.counts()


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the dump folder to write")
    ap.add_argument("--data-dir", type=Path, help="the shared data folder (default: semdup's data_dir())")
    args = ap.parse_args(argv)
    from semdup.data.paths import data_dir

    counts = write_site(build_site(args.data_dir or data_dir()), args.out)
    print(json.dumps({"out": str(args.out), **counts}))


if __name__ == "__main__":
    main()
