"""The index schema: one index serves all six lexical models of BOW-CNN's Tables 3–4, plus semdup's fields.

Each text field (``title``, ``body``, and ``text`` = title + body through ``copy_to``) is analysed once per
similarity: the main field scores with BM25 and each sub-field carries one other similarity, so a
search template picks a model by picking a sub-field (``title.lmj``, ``text.dfr`` ...)::

    bm25   BM25 (k1 1.2, b 0.75)                          Robertson & Zaragoza 2009
    lmj    LMJelinekMercer (lambda 0.7)                    Zhai & Lafferty 2001
    lmd    LMDirichlet (mu 2000)                           Zhai & Lafferty 2001
    dfr    DFR G-L-H2 (basic model g, after-effect l, normalisation h2 c=1)   Amati & van Rijsbergen 2002
    ib     IB LL-DF-H2 (distribution ll, lambda df, normalisation h2)         Clinchant & Gaussier 2010
    tfidf  Lucene's classic TF-IDF, as a ``scripted`` similarity (tf = sqrt(freq), idf = 1 + ln((N+1)/(df+1)),
           norm = 1/sqrt(length); score = boost·tf·idf²·norm, the query norm left out as it does not change ranks)

semdup's own fields live under ``semdup``. Every semdup index has ``model`` (the bundle version id, so two models'
vectors are never mixed), ``indexed_at`` and ``packed`` (a ``binary`` field with doc values holding the exact
float32 vector and term weights, :mod:`semdup.index_format.packed_fields`: the reranker reads it with
``docvalue_fields`` from the candidate search's own hits, no second request). That is all the fusion needs.

The two search structures are opt-in, one per reranker candidate path (:class:`CandidateFields`):

* ``sparse``: ``terms``, rank_features holding the learned BOW weights tf·t, L2-normalised, so a bool of linear
  rank_feature clauses boosted by the query's weights is exactly cos_bow (learned-sparse candidates);
* ``knn``: ``vector``, a lucene-engine ``knn_vector`` with cosinesimil (k-NN candidates; needs the k-NN plugin).

Why opt-in (DESIGN.md lists both as always there): they are what makes semantic indexing dear. On Travel posts
(``benchmarks/indexing.py``, 2 cores) OpenSearch spends about as much CPU on them as on all six lexical models
together (2.1 s more for 4,919 posts, where the whole lexical indexing takes 2.0 s); with neither, semantic
indexing ran at 0.57 × plain lexical indexing, with both at 0.35 × (README, Speed). The
default reranker (BM25 template candidates + fusion) reads only ``packed``; hybrid candidates buy recall
(``semdup eval candidate-recall``) for that price, so an operator chooses them when creating or enabling the
index (``semdup index-posts --sparse --knn``, ``semdup enable --sparse --knn``). Indices written by older semdup
versions, which always had ``terms`` and ``vector``, keep them and keep having them written.

Measured choices (``benchmarks/indexing.py``, ``benchmarks/rerank_latency.py``, Travel posts, 400 dimensions):

* With k-NN, the float vector stays in ``_source``: ``_source.excludes`` on ``semdup.vector`` made indexing cost *more*
  server CPU (OpenSearch then parses every document's source into a map and writes it again), and it cannot be
  added to an existing index's mapping anyway. The reranker reads ``packed`` instead of the ``_source`` floats.
* HNSW ``ef_construction`` 32 instead of the plugin's 100 (``m`` stays 16): about half the graph's indexing
  CPU. The graph is coarser, so the k-NN query searches with ``ef_search`` = 2·k
  (:class:`semdup.reranker.sources.KnnSource`); with both, ``semdup eval candidate-recall --data travel
  --k 100`` gave the same recall as before (+knn 85.14, +sparse+knn 88.76).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from semdup.index_format.layout import Shape

__all__ = [
    "CandidateFields",
    "LEXICAL_MODELS",
    "TEXT_FIELDS",
    "index_body",
    "semdup_fields_mapping",
    "missing_semdup_fields",
    "lexical_field",
    "feature_name",
    "HNSW_PARAMETERS",
    "PACKED_FIELD",
]

# model name -> sub-field suffix ("" = the main field, BM25)
LEXICAL_MODELS: dict[str, str] = {"bm25": "", "lmj": "lmj", "lmd": "lmd", "dfr": "dfr", "ib": "ib", "tfidf": "tfidf"}
TEXT_FIELDS = ("title", "body", "text")

_TFIDF_WEIGHT = "double idf = Math.log((field.docCount + 1.0) / (term.docFreq + 1.0)) + 1.0; return query.boost * idf;"
_TFIDF_SCORE = (
    "double idf = Math.log((field.docCount + 1.0) / (term.docFreq + 1.0)) + 1.0;"
    " double tf = Math.sqrt(doc.freq); double norm = 1.0 / Math.sqrt(doc.length);"
    " return weight * tf * idf * norm;"
)

SIMILARITIES: dict[str, dict[str, Any]] = {
    "semdup_bm25": {"type": "BM25", "k1": 1.2, "b": 0.75},
    "semdup_lmj": {"type": "LMJelinekMercer", "lambda": 0.7},
    "semdup_lmd": {"type": "LMDirichlet", "mu": 2000},
    "semdup_dfr": {
        "type": "DFR",
        "basic_model": "g",
        "after_effect": "l",
        "normalization": "h2",
        "normalization.h2.c": 1.0,
    },
    "semdup_ib": {
        "type": "IB",
        "distribution": "ll",
        "lambda": "df",
        "normalization": "h2",
        "normalization.h2.c": 1.0,
    },
    "semdup_tfidf": {
        "type": "scripted",
        "weight_script": {"source": _TFIDF_WEIGHT},
        "script": {"source": _TFIDF_SCORE},
    },
}

ANALYZER = "english"  # standard tokenizer, lower-case, english stop words and Porter stemming


# lucene HNSW build parameters of semdup.vector: m as the plugin's default, ef_construction 32 (default 100) halves
# the graph's indexing CPU; see the module docstring for the recall trade and the query-side ef_search.
HNSW_PARAMETERS: dict[str, int] = {"m": 16, "ef_construction": 32}
PACKED_FIELD = "semdup.packed"  # exact vector + term weights in doc values, read by the reranker


def lexical_field(model: str, field: str) -> str:
    """The field a lexical model scores: ``lexical_field("dfr", "title") == "title.dfr"``."""
    if model not in LEXICAL_MODELS:
        raise ValueError(f"unknown lexical model {model!r}; known: {', '.join(LEXICAL_MODELS)}")
    if field not in TEXT_FIELDS:
        raise ValueError(f"unknown text field {field!r}; known: {', '.join(TEXT_FIELDS)}")
    suffix = LEXICAL_MODELS[model]
    return f"{field}.{suffix}" if suffix else field


def feature_name(token: str) -> str:
    """A rank_features key for a token: OpenSearch reads dots in feature names as object paths
    (``semdup.terms.12.04`` finds nothing), so '.' becomes U+00B7, which the tokenizer never puts in a word."""
    return token.replace(".", "\u00b7")


def _text_field(copy_to: str | None) -> dict[str, Any]:
    sub = {
        suffix: {"type": "text", "analyzer": ANALYZER, "similarity": f"semdup_{model}"}
        for model, suffix in LEXICAL_MODELS.items()
        if suffix
    }
    field: dict[str, Any] = {"type": "text", "analyzer": ANALYZER, "similarity": "semdup_bm25", "fields": sub}
    if copy_to:
        field["copy_to"] = copy_to
    return field


@dataclass(frozen=True)
class CandidateFields:
    """Which search structures an index holds beside the packed fields: one per reranker candidate path.

    Attributes:
        sparse: ``semdup.terms`` as rank_features (learned-sparse candidates).
        knn: ``semdup.vector`` as a ``knn_vector`` (k-NN candidates; the index needs ``index.knn: true``).
    """

    sparse: bool = False
    knn: bool = False

    @classmethod
    def of_mapping(cls, semdup_props: dict[str, Any] | None) -> CandidateFields:
        """The fields an index's mapping (its ``semdup.properties``) holds; a plain float ``vector`` (older
        semdup, no k-NN plugin) is not a search structure: the packed copy replaces it."""
        props = semdup_props or {}
        return cls(
            sparse=(props.get("terms") or {}).get("type") == "rank_features",
            knn=(props.get("vector") or {}).get("type") == "knn_vector",
        )

    def __and__(self, other: CandidateFields) -> CandidateFields:
        return CandidateFields(self.sparse and other.sparse, self.knn and other.knn)

    def __or__(self, other: CandidateFields) -> CandidateFields:
        return CandidateFields(self.sparse or other.sparse, self.knn or other.knn)

    @classmethod
    def common(cls, each: Iterable[CandidateFields]) -> CandidateFields:
        """What every one holds (the concrete indices behind an alias); none for an empty list."""
        out: CandidateFields | None = None
        for fields in each:
            out = fields if out is None else out & fields
        return out or cls()

    def names(self) -> list[str]:
        """``["sparse", "knn"]``, the ones held (what a document's ``semdup.structures`` records)."""
        return [n for n, on in (("sparse", self.sparse), ("knn", self.knn)) if on]

    def describe(self) -> str:
        return "+".join(self.names()) or "packed fields only"


def semdup_fields_mapping(dimension: int | None = None, fields: CandidateFields | None = None) -> dict[str, Any]:
    """The ``semdup`` object mapping; ``dimension`` is known once a model bundle is chosen."""
    f = fields or CandidateFields()
    props: dict[str, Any] = {
        "model": {"type": "keyword"},
        "indexed_at": {"type": "date"},
        "packed": {"type": "binary", "doc_values": True},
        # the hash of the source text that was encoded, and the search structures written: what a backfill or
        # `semdup watch` compares to find posts edited since, or written before a structure was added
        "content_hash": {"type": "keyword"},
        "structures": {"type": "keyword"},
    }
    if f.sparse:
        props["terms"] = {"type": "rank_features"}
    if f.knn and dimension is not None:
        props["vector"] = {
            "type": "knn_vector",
            "dimension": int(dimension),
            "method": {
                "name": "hnsw",
                "engine": "lucene",
                "space_type": "cosinesimil",
                "parameters": dict(HNSW_PARAMETERS),
            },
        }
    return {"properties": props}


def missing_semdup_fields(
    mapped: dict[str, Any], dimension: int | None = None, fields: CandidateFields | None = None
) -> dict[str, dict[str, Any]]:
    """The ``semdup`` properties an index's mapping lacks (``mapped``: its ``semdup.properties``) for ``fields``
    (default: the search structures it already has, so only the always-there fields are added).

    An index enabled or created by an older semdup gains only these through ``put_mapping``: a field already
    mapped keeps its mapping (a knn_vector's HNSW parameters cannot be changed in place).
    """
    wanted = semdup_fields_mapping(dimension, fields or CandidateFields.of_mapping(mapped))["properties"]
    return {name: spec for name, spec in wanted.items() if name not in mapped}


def index_body(
    *,
    shape: Shape | None = None,
    dimension: int | None = None,
    fields: CandidateFields | None = None,
    refresh_interval: str = "1s",
) -> dict[str, Any]:
    """Settings and mappings for a semdup-created index (create it with ``client.indices.create``).

    ``shape``: its shards and replicas (:mod:`semdup.index_format.layout`: a companion follows the site's index,
    an index semdup creates gets ``IndexLayout.created()``); default one shard, ``auto_expand_replicas: 0-1``.
    """
    fields = fields or CandidateFields()
    settings: dict[str, Any] = {
        **(shape or Shape()).settings(),
        "refresh_interval": refresh_interval,
        "similarity": SIMILARITIES,
    }
    if fields.knn and dimension is not None:
        settings["knn"] = True
    return {
        "settings": {"index": settings},
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "post_id": {"type": "keyword"},
                "title": _text_field("text"),
                "body": _text_field("text"),
                "text": _text_field(None),
                "semdup": semdup_fields_mapping(dimension, fields),
            },
        },
    }
