"""Register the templates as stored scripts and run them (opensearch-py's ``put_script`` / ``msearch_template``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import regex

from semdup.core.errors import OpenSearchRefused, SearchIndexError, SemdupError
from semdup.index_format.schema import LEXICAL_MODELS
from semdup.opensearch_io.boundary import OpenSearch, error_reason
from semdup.search_templates.components import STORED_SCRIPTS
from semdup.search_templates.templates import VARIANTS, all_templates, template_id, template_source

__all__ = [
    "register_templates",
    "ensure_templates",
    "render_template",
    "Hit",
    "msearch_templates",
    "MAX_QUERY_TERMS",
    "MAX_ANALYSED_TERMS",
    "query_text",
]

logger = logging.getLogger(__name__)

# A post of thousands of words would become thousands of match clauses (and hit the clause limit);
# its first words carry the subject anyway.
MAX_QUERY_TERMS = 300
# OpenSearch refuses a query of more than 1,024 clauses (indices.query.bool.max_clause_count), and the match query
# makes one clause per analysed term. One whitespace "word" can hold hundreds of terms: CJK text (one term per
# ideograph), comma-separated lists, emoji. So the text is also cut at this many terms, counted so that the count
# never falls below the standard analyzer's (each CJK character, symbol and emoji counts as one term).
MAX_ANALYSED_TERMS = 1000
_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}"
_TERM = regex.compile(
    rf"[{_CJK}]"  # one term per character
    rf"|(?:(?![{_CJK}])[\p{{L}}\p{{M}}\p{{N}}_])+"  # a run of letters and digits (split at any punctuation)
    r"|[^\s\p{L}\p{M}\p{N}\p{P}\p{Z}\p{C}]"  # a symbol or emoji
)


@dataclass(frozen=True)
class Hit:
    """One candidate: the post id and the lexical model's score."""

    id: str
    score: float


def query_text(
    title: str, body: str = "", max_terms: int = MAX_QUERY_TERMS, max_analysed: int = MAX_ANALYSED_TERMS
) -> str:
    """The query text of a post: its first ``max_terms`` words, cut further so that it analyses to at most
    ``max_analysed`` terms (any script, any punctuation: it never exceeds OpenSearch's clause limit)."""
    text = " ".join(f"{title} {body}".split()[:max_terms])
    for i, match in enumerate(_TERM.finditer(text)):
        if i == max_analysed:
            return text[: match.start()].rstrip()
    return text


def register_templates(client: OpenSearch) -> list[str]:
    """Store every template and the fusion's two scripts, components and fused (idempotent: the same id is
    overwritten with the same source)."""
    ids = []
    for tid, source in all_templates().items():
        client.put_script(id=tid, body={"script": {"lang": "mustache", "source": source}})
        ids.append(tid)
    for sid, source in STORED_SCRIPTS.items():
        client.put_script(id=sid, body={"script": {"lang": "painless", "source": source}})
    logger.info("registered %d search templates and %s", len(ids), ", ".join(STORED_SCRIPTS))
    return [*ids, *STORED_SCRIPTS]


def _ensure_stored(client: OpenSearch, sid: str, lang: str, source: str, timeout: float) -> bool:
    """Store script ``sid`` unless the cluster holds it with this source; False when not allowed to."""
    try:
        found = client.get_script(id=sid, params={"request_timeout": timeout})
        if (found.get("script") or {}).get("source") == source:
            return True
    except OpenSearchRefused as exc:
        if exc.status not in (403, 404):  # 403: may read no scripts; storing may still be allowed
            raise
    try:
        client.put_script(id=sid, body={"script": {"lang": lang, "source": source}},
                          params={"request_timeout": timeout})
        logger.info("stored script %s", sid)
        return True
    except OpenSearchRefused as exc:
        if exc.status != 403:
            raise
        logger.warning(
            "not allowed to store the script %s; if the cluster lacks it, candidate searches fail: run `semdup "
            "enable` (or grant cluster:admin/script/put) once as a user who may",
            sid,
        )
        return False


def ensure_templates(
    client: OpenSearch,
    models: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    timeout: float = 10.0,
) -> bool:
    """Store the templates (default: every model and variant) and the components and fused scripts
    (:mod:`semdup.search_templates.components`) that the cluster lacks or holds in another version; True when all
    are stored.

    The reranker calls this before its first search, ``semdup enable`` and index creation before that: a cluster
    where nobody stored them answers every ``_msearch/template`` with "no requests added", which says nothing
    about templates. Reading first spares a cluster that has them a cluster-state update per start. A user not
    allowed to store scripts (no ``cluster:admin/script/put``) gets a warning and False.

    Raises:
        OpenSearchUnavailable: the cluster does not answer.
    """
    wanted = [(m, v) for m in (models or LEXICAL_MODELS) for v in (variants or VARIANTS)]
    ok = True
    for sid, source in STORED_SCRIPTS.items():
        ok &= _ensure_stored(client, sid, "painless", source, timeout)
    for model, variant in dict.fromkeys(wanted):
        ok &= _ensure_stored(client, template_id(model, variant), "mustache", template_source(model, variant), timeout)
    return ok


def render_template(client: OpenSearch, template_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """The query a stored template produces (``_render/template``): for tests and for operators' eyes."""
    out = client.render_search_template(id=template_id, body={"params": params})
    return out["template_output"]


def msearch_templates(
    client: OpenSearch, index: str, requests: Sequence[tuple[str, dict[str, Any]]], batch: int = 100
) -> list[list[Hit]]:
    """Run (template id, params) pairs with ``_msearch/template``; one hit list per request, in order.

    Raises:
        SearchIndexError: the index does not exist. SemdupError: a request failed (its error is named).
    """
    results: list[list[Hit]] = []
    for start in range(0, len(requests), batch):
        body: list[dict[str, Any]] = []
        for tid, params in requests[start : start + batch]:
            body.append({"index": index})
            body.append({"id": tid, "params": params})
        resp = client.msearch_template(body=body)
        for r in resp["responses"]:
            if "error" in r:
                err = r["error"]
                if isinstance(err, dict) and err.get("type") == "index_not_found_exception":
                    raise SearchIndexError(f"index {index!r} does not exist; index posts into it first")
                raise SemdupError(f"search template request failed: {error_reason(err)}")
            results.append([Hit(h["_id"], float(h["_score"])) for h in r["hits"]["hits"]])
    return results
