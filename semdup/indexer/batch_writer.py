"""A post batch → index documents with the lexical fields and semdup's fields, and the model-mixing guard.

This is the work of the Celery tasks without Celery, so it can be run and tested directly:

* ``index_batch``: posts (JSON) → ``index`` actions with ``_id = post id`` holding ``post_id``, ``title``,
  ``body`` (cleaned by the shared text pipeline) and ``semdup.{model, packed}`` from the bundle (plus ``terms`` /
  ``vector`` where the index holds those search structures, :class:`~semdup.index_format.schema.CandidateFields`).
  Content is a pure function of (post, bundle), so writing a batch twice writes the same documents.
  Encoding and writing overlap: the batch goes in chunks, and while one chunk's bulk request is in flight (on a
  helper thread; the HTTP wait releases the GIL) the next chunk is encoded (onnxruntime releases it too).
* ``backfill_batch``: ids → reads the posts' text from the index and replaces only ``semdup`` (a scripted
  partial update: ``ctx._source.semdup = params.semdup``, so another model's term keys cannot linger by
  object merging). The index's other fields are untouched.
* ``delete_batch``: ids → deletes; ids already gone count as deleted.

Model-mixing guard: the index's mapping ``_meta.semdup_model`` names the one bundle version whose vectors
it holds. The first write claims it; a write with another version is refused before anything is written
(``SearchIndexError``). The mapping ``_meta`` was chosen over looking at existing documents' ``semdup.model``
because it is one cheap read, is set before the first document lands (no race with an empty index), and
holds for indices semdup did not create (``semdup enable`` sets it there too). Rolling out a new model
means a new index behind an alias, as DESIGN.md says.

Bad posts (malformed JSON, or a post the one rule set for ids and text refuses, :mod:`semdup.core.post_rules`:
no visible text, control characters, an id OpenSearch refuses as ``_id``...) and documents OpenSearch refuses for
good are returned as failures for the caller to park, and the batch's other posts are written: posts are checked
before the bulk request (one bad ``_id`` makes OpenSearch refuse the whole request), and a request refused whole
all the same (400, 413) is split until the refused documents stand alone. 429 rejections left after the bulk
retries and connection errors raise ``OpenSearchUnavailable`` so the task is retried.

Posts read back from an index (``backfill_batch``) meet only ``check_post``: their text is the site's, already
stored, and parking it for a stray control character would leave the post without semdup's fields.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from semdup.core.errors import OpenSearchRefused, PostError, SearchIndexError
from semdup.core.post_rules import check_post_input, opensearch_id_problem
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipelineSettings, check_post
from semdup.index_format import mapping as index_mapping
from semdup.index_format.companion import SourceFields, source_post
from semdup.index_format.documents import content_hash, lexical_document, stored_post
from semdup.index_format.mapping import MODEL_META_KEY, candidate_fields, semdup_source
from semdup.index_format.schema import CandidateFields, missing_semdup_fields
from semdup.opensearch_io.boundary import ItemFailure, OpenSearch, mget_docs
from semdup.opensearch_io.bulk import BulkReport, bulk_write, chunked

__all__ = [
    "DocumentEncoder",
    "BatchResult",
    "index_batch",
    "write_overlapped",
    "INDEX_CHUNK",
    "chunk_size_for",
    "check_doc_id",
    "backfill_batch",
    "delete_batch",
    "ensure_index_model",
]

logger = logging.getLogger(__name__)

_OWN_FIELDS = SourceFields("", "title", "body")  # where an index semdup created keeps the text it encodes
# Posts per chunk inside index_batch (one encoder pass, one bulk request); the chunks of a task overlap: the next
# is prepared while this one is encoded and the previous one written. For the cheap (CNN-family) encoders of
# benchmarks/indexing.py the overlap paid: a 64-post task as two 32-post requests, 881 and 885 posts/s on the idle
# 2-core machine, 807 and 790 as one request (3 runs each, alternated). A transformer encoder sorts each chunk's
# texts and titles by length, so a larger chunk pads less, and the encoder's CPU, not the bulk request, is most of
# the cost: on CPU a task of up to CPU_CHUNK_MAX posts is one chunk (benchmarks/ingest_profile.py --windows,
# docs/benchmarks.md: a 100-post task costs less CPU per post as one pool than as two of 50, and its one bulk
# request less node CPU than two), larger tasks go in chunks of CPU_CHUNK_MAX.
INDEX_CHUNK = 32  # the CNN-family encoders' chunk (the figures above); the smallest default
CPU_CHUNK_MAX = 128
# On a GPU a chunk's texts and titles fill about one GPU batch (semdup.bundle.bundle.GPU_BATCH_ROWS).
GPU_INDEX_CHUNK = 512
_REFUSED_WHOLE = (400, 413)  # statuses of a bulk request refused as a whole (validation, too large)


class DocumentEncoder(Protocol):
    """What the indexer needs from a model bundle (``semdup.bundle.bundle.Bundle``)."""

    version: str

    def document_fields(self, posts: Sequence[Post]) -> list[dict[str, Any]]: ...


@dataclass
class BatchResult:
    """Counts of one batch; ``failed`` are the posts to park (each an :class:`ItemFailure`), ``payloads`` their
    posts as JSON."""

    written: int = 0
    failed: list[ItemFailure] = field(default_factory=list)
    payloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


def check_doc_id(post_id: str) -> None:
    """Refuse an id OpenSearch would refuse as a document ``_id`` (it would fail the whole bulk request).

    Only OpenSearch's own limits (:func:`~semdup.core.post_rules.opensearch_id_problem`): deleting must still reach
    a post written before the stricter id rules that new posts meet (:func:`check_post_input`).

    Raises:
        PostError: the id is empty or longer than :data:`~semdup.core.post_rules.MAX_ID_BYTES` bytes of UTF-8.
    """
    problem = opensearch_id_problem(post_id)
    if problem is not None:
        raise PostError(f"post {post_id[:40]!r}: {problem}")


def _payload_id(obj: Any) -> str:
    raw = json.dumps(obj, sort_keys=True, default=str).encode("utf-8", "replace")
    return "malformed-" + hashlib.sha1(raw).hexdigest()[:16]


def _parse_posts(batch: Sequence[Any], result: BatchResult) -> list[Post]:
    posts: list[Post] = []
    for obj in batch:
        try:
            if not isinstance(obj, dict) or "id" not in obj:
                raise PostError("expected a JSON object with 'id', 'title' and 'body'")
            post = Post.from_json(obj)
            check_post_input(post)  # the rules the CLI and the HTTP API apply: here for producers that bypass both
        except PostError as exc:
            pid = str(obj["id"]) if isinstance(obj, dict) and "id" in obj else _payload_id(obj)
            result.failed.append(ItemFailure.of_error(pid, exc))
            result.payloads[pid] = obj if isinstance(obj, dict) else {"raw": str(obj)[:10_000]}
            continue
        posts.append(post)
    return posts


def _encode(bundle: DocumentEncoder, posts: list[Post], result: BatchResult) -> list[tuple[Post, dict[str, Any]]]:
    """Encode a batch; if the bundle refuses it, encode post by post so only the bad posts fail."""
    if not posts:
        return []
    try:
        return list(zip(posts, bundle.document_fields(posts), strict=True))
    except PostError:
        pass
    out = []
    for post in posts:
        try:
            out.append((post, bundle.document_fields([post])[0]))
        except PostError as exc:
            result.failed.append(ItemFailure.of_error(post.id, exc))
            result.payloads[post.id] = post.to_json()
    return out


def chunk_size_for(posts: int, device: str = "cpu", sorts_by_length: bool = False) -> int:
    """Posts per chunk of an ``index_batch`` call of ``posts`` posts (see the constants): GPU_INDEX_CHUNK on CUDA;
    on CPU, for an encoder that sorts its texts by length (a transformer), the whole task up to CPU_CHUNK_MAX posts,
    never below INDEX_CHUNK; INDEX_CHUNK for the others."""
    if device == "cuda":
        return GPU_INDEX_CHUNK
    if sorts_by_length:
        return max(INDEX_CHUNK, min(CPU_CHUNK_MAX, posts))
    return INDEX_CHUNK


def _prepared_chunks(
    bundle: DocumentEncoder, chunks: Iterable[list[Post]], result: BatchResult
) -> Iterator[list[tuple[Post, dict[str, Any]]]]:
    """Each chunk encoded (as :func:`_encode`), the next chunk prepared (text cleaning, tokenising: the bundle's
    ``prepare_documents``) on a helper thread while this one runs the encoder. An encoder without
    ``prepare_documents`` (a test's stand-in) encodes each chunk in one call."""
    prepare = getattr(bundle, "prepare_documents", None)
    if prepare is None:
        for chunk in chunks:
            yield _encode(bundle, chunk, result)
        return

    def finish(chunk: list[Post], prepared: Future[Any]) -> list[tuple[Post, dict[str, Any]]]:
        try:
            ready = prepared.result()
        except PostError:  # a post the bundle refuses: post by post, so only the bad ones fail
            return _encode(bundle, chunk, result)
        return list(zip(chunk, bundle.encode_prepared(ready, arrays=True), strict=True))

    pending: tuple[list[Post], Future[Any]] | None = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="semdup-prepare") as pool:
        for chunk in chunks:
            if not chunk:
                continue
            nxt = (chunk, pool.submit(prepare, chunk))
            if pending is not None:
                yield finish(*pending)
            pending = nxt
        if pending is not None:
            yield finish(*pending)


def _split_failures(report: BulkReport, result: BatchResult, what: str) -> None:
    """Per-document failures: those still rejected as overloaded after the bulk retries are transient (raise, the
    task is retried), the rest are parked."""
    rejected = [f for f in report.failed if f.transient]
    if rejected:
        first = rejected[0]
        raise first.error(
            f"OpenSearch rejected {len(rejected)} documents of a {what} batch as overloaded after the bulk retries "
            f"(first: {first.id}, {first}); the batch is retried later"
        )
    result.written += report.written
    result.failed.extend(report.failed)


def ensure_index_model(client: OpenSearch, index: str, version: str) -> CandidateFields:
    """Claim ``index`` for bundle ``version``, or refuse if it holds another model's vectors; returns the search
    structures its mapping holds (:func:`semdup_source` writes exactly those).

    Also adds the always-there fields (``semdup.packed``…) to an index whose ``semdup`` mapping predates them
    (``put_mapping`` adds a field to an existing index; documents written before keep working: the reranker reads
    their ``_source`` instead). It never adds a search structure: that is the operator's choice
    (``semdup enable --sparse --knn``).

    Raises:
        SearchIndexError: the index is missing, or its ``_meta.semdup_model`` is another version.
    """
    mappings = index_mapping.mappings(client, index)
    for name, mapping in mappings.items():
        if index_mapping.semdup_props(mapping) is None:
            raise SearchIndexError(
                f"index {name!r} was not created by semdup (no semdup fields in its mapping); semdup never writes "
                f"its documents: connect it with `semdup enable --index {index}` and let the workers fill the "
                "companion (`semdup backfill`, `semdup watch`, or the sync_posts task / POST /v1/posts/sync)"
            )
        current = (mapping.get("_meta") or {}).get(MODEL_META_KEY)
        if current is not None and current != version:
            raise SearchIndexError(
                f"index {name!r} holds vectors of model {current}, not {version}; vectors of two models are never "
                f"mixed: index into a new index and switch an alias, or run workers with bundle {current}"
            )
    for name, mapping in mappings.items():
        current = (mapping.get("_meta") or {}).get(MODEL_META_KEY)
        semdup_props = index_mapping.semdup_props(mapping)
        missing = missing_semdup_fields(semdup_props) if semdup_props is not None else {}
        if missing:
            client.indices.put_mapping(index=name, body={"properties": {"semdup": {"properties": missing}}})
            logger.info("index %s gained semdup.%s (mapping written by an older semdup)", name, ", ".join(missing))
        if current == version:
            continue
        # put_mapping replaces _meta as a whole: keep the keys the index's owner put there.
        meta = {**(mapping.get("_meta") or {}), MODEL_META_KEY: version}
        client.indices.put_mapping(index=name, body={"_meta": meta})
        logger.info("index %s claimed for model %s", name, version)
    return index_mapping.common_fields(mappings)


def index_batch(
    client: OpenSearch,
    index: str,
    batch: Sequence[Any],
    bundle: DocumentEncoder,
    *,
    settings: TextPipelineSettings | None = None,
    chunk_size: int | None = None,
    search: CandidateFields | None = None,
) -> BatchResult:
    """Write full documents (lexical + semdup fields) for a batch of posts given as JSON objects.

    The batch is encoded and written in chunks of ``chunk_size`` posts (default :func:`chunk_size_for` the
    bundle's device and encoder), in three overlapping stages: the next chunk is prepared (cleaned, tokenised) on
    one helper thread while this one is encoded, and the previous one's bulk request is in flight on another (see
    :func:`write_overlapped`). Documents go out in the batch's order, the same as in one request.
    ``search``: the index's search structures (what :func:`ensure_index_model` returned); None reads the mapping.
    """
    result = BatchResult()
    posts = _parse_posts(batch, result)
    search = search if search is not None else candidate_fields(client, index)
    size = chunk_size or chunk_size_for(
        len(posts), getattr(bundle, "device", "cpu"), bool(getattr(bundle, "sorts_by_length", False))
    )

    def action_chunks() -> Iterable[list[dict[str, Any]]]:
        for encoded in _prepared_chunks(bundle, chunked(posts, size), result):
            actions = []
            for post, fields in encoded:
                source = lexical_document(post, settings)
                source["semdup"] = _semdup_fields(post, fields, search)
                actions.append({"_op_type": "index", "_index": index, "_id": post.id, "_source": source})
            yield actions

    report = write_overlapped(client, action_chunks())
    _split_failures(report, result, "index_posts")
    failed = {f.id for f in result.failed}
    by_id = {p.id: p for p in posts}
    result.payloads = {k: v for k, v in result.payloads.items() if k in failed}
    for pid in failed - result.payloads.keys():
        if pid in by_id:
            result.payloads[pid] = by_id[pid].to_json()
    return result


def _semdup_fields(post: Post, fields: dict[str, Any], search: CandidateFields) -> dict[str, Any]:
    """``semdup_source`` plus what freshness checks compare: the hash of the text encoded, the structures written."""
    out = semdup_source(fields, search)
    out["content_hash"] = content_hash(post.title, post.body)
    out["structures"] = search.names()
    return out


def write_overlapped(client: OpenSearch, action_chunks: Iterable[list[dict[str, Any]]]) -> BulkReport:
    """Bulk-write each chunk of actions on a helper thread while the caller's iterator builds the next one.

    One request is in flight at a time and chunks are written in order. An error of a request is raised once
    the chunk after it is built; whatever was in flight is waited for before this returns or raises.
    """
    report = BulkReport()
    pending: Future[BulkReport] | None = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="semdup-bulk") as pool:
        for actions in action_chunks:
            if pending is not None:
                report = report.merge(pending.result())
                pending = None
            if actions:
                pending = pool.submit(_bulk_or_split, client, actions)
        if pending is not None:
            report = report.merge(pending.result())
    return report


def _bulk_or_split(client: OpenSearch, actions: list[dict[str, Any]]) -> BulkReport:
    """One bulk request; if OpenSearch refuses it whole (400, 413), halves until each refused document stands
    alone and fails by itself, so the rest of the batch is written."""
    try:
        return bulk_write(client, actions, total=len(actions), chunk_size=len(actions))
    except OpenSearchRefused as exc:
        if exc.status not in _REFUSED_WHOLE:
            raise
        if len(actions) == 1:
            failure = ItemFailure.of_error(str(actions[0]["_id"]), exc)
            logger.warning("bulk request of %s refused: %s", failure.id, str(failure)[:200])
            return BulkReport(failed=[failure])
        half = len(actions) // 2
        return _bulk_or_split(client, actions[:half]).merge(_bulk_or_split(client, actions[half:]))


def _fetch_posts(client: OpenSearch, index: str, ids: Sequence[str], result: BatchResult) -> list[Post]:
    """The posts of an index semdup created, from its (cleaned) ``title`` and ``body``."""
    title_field, body_field = _OWN_FIELDS.title, _OWN_FIELDS.body
    got = client.mget(index=index, body={"ids": list(ids)}, _source_includes=[title_field, body_field])
    docs = mget_docs(got, f"GET /{index}/_mget")
    posts = []
    for doc in docs:
        if not doc.get("found"):
            result.missing.append(str(doc["_id"]))  # deleted since the backfill listed it: nothing to fill
            continue
        own = source_post(str(doc["_id"]), doc.get("_source") or {}, _OWN_FIELDS)
        post = stored_post(own["id"], own["title"], own["body"])  # the stored text is cleaned already
        try:
            check_post(post)
        except PostError as exc:
            result.failed.append(ItemFailure.of_error(post.id, exc))
            continue
        posts.append(post)
    return posts


_SET_SEMDUP = "ctx._source.semdup = params.semdup"


def backfill_batch(
    client: OpenSearch,
    index: str,
    ids: Sequence[str],
    bundle: DocumentEncoder,
    search: CandidateFields | None = None,
) -> BatchResult:
    """Fill only the ``semdup`` fields of posts already in ``index``, from the text stored there.

    ``search``: the index's search structures (what :func:`ensure_index_model` returned); None reads the mapping.
    """
    result = BatchResult()
    search = search if search is not None else candidate_fields(client, index)
    posts = _fetch_posts(client, index, ids, result)
    encoded = _encode(bundle, posts, result)
    actions = [
        {
            "_op_type": "update",
            "_index": index,
            "_id": post.id,
            "script": {
                "source": _SET_SEMDUP,
                "lang": "painless",
                "params": {"semdup": _semdup_fields(post, fields, search)},
            },
        }
        for post, fields in encoded
    ]
    report = _bulk_or_split(client, actions) if actions else BulkReport()
    _split_failures(report, result, "backfill")
    return result


def _valid_id(post_id: str) -> bool:
    try:
        check_doc_id(post_id)
    except PostError:
        return False
    return True


def delete_batch(client: OpenSearch, index: str, ids: Sequence[str]) -> BatchResult:
    """Delete posts by id; an id that is already gone counts as deleted (deleting twice is harmless)."""
    result = BatchResult()
    valid = [str(i) for i in ids if _valid_id(str(i))]
    result.written += len(ids) - len(valid)  # an id OpenSearch refuses as _id names no document: nothing to delete
    actions = [{"_op_type": "delete", "_index": index, "_id": i} for i in valid]
    report = _bulk_or_split(client, actions) if actions else BulkReport()
    gone = [f for f in report.failed if f.missing]
    report.failed = [f for f in report.failed if not f.missing]
    report.written += len(gone)
    _split_failures(report, result, "delete")
    return result
