"""The hybrid default: a base encoder's bundle + the corpus's IDF as bag-of-words weights + a fitted fusion.

    s = β_bow · cos(tf(q)∘idf, tf(c)∘idf) + β_dense · cos(E(q), E(c)) + α · lexnorm(BM25) + β_title · cos(E(title q),
        E(title c))

Nothing is trained: ``E`` is the named pre-trained encoder as published
(:mod:`semdup.export.base_encoder_bundle`), the term weights are the IDF (``log N/df``, dos Santos et al. 2015,
§3.2) of the user's posts through the shared text pipeline, and (β_bow, α, β_title) come from a grid on the
user's labelled queries (:mod:`semdup.learn.fusion_fit`), with each query's candidates and components built
offline as the reranker builds them: BM25 top k (the torch-free :class:`~semdup.core.lexical_scores.LexicalIndex`)
∪ the k nearest dense vectors, cos_bow, cos_dense, the raw BM25 score and the cosine of the titles' own vectors.
The weights are fitted before the bundle is written because its version hashes them.
Torch-free (numpy, onnxruntime); on 2 CPU cores MiniLM encodes about 12 Travel posts a second.

What the user brings (``data``): ``travel`` / ``semeval`` / ``askubuntu`` (the bundled sets: Travel's train split,
SemEval-2016 train parts 1 and 2, AskUbuntu train pairs), a Stack Exchange dump folder with ``splits.tsv`` (its train
split), or a JSONL file of labelled pairs (all of it). The fusion is fitted on training queries (741 Travel queries,
267 SemEval originals, not the 108 and 50 of the dev sets), so that dev stays a held-out check: chosen on SemEval's
50 dev questions, the title term gained 1.7 MAP there and lost 0.3 on test (issue #18). ``corpus``: extra posts whose
text joins the vocabulary (the posts to be indexed; no labels are read).

Example::

    fit = fit_default("artifacts/bundles/minilm", "travel", "artifacts/bundles/default-travel")
    fit.fusion, fit.dev, fit.version       # ({"beta_bow": 0.2, "beta_dense": 1.0, "alpha": 0.3}, 61.2, "hybrid-…")
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from semdup.bundle.bundle import (
    MANIFEST_FILE,
    TERM_WEIGHTS_FILE,
    VOCAB_FILE,
    Bundle,
    read_bundle_files,
    write_bundle,
)
from semdup.core.errors import ConfigError
from semdup.core.lexical_scores import LexicalIndex
from semdup.core.posts import Post
from semdup.core.scoring import bow_matrix, title_vectors
from semdup.core.text_pipeline import TextPipeline, Vocabulary
from semdup.learn.default_flagging import EveryPost, flagging_calibration, save_flagging
from semdup.learn.fusion_fit import GRID_TITLE, FusionFit, Group, choose_fusion, group_scores
from semdup.measures.fitting import best_threshold
from semdup.measures.ranking import retrieval_scores, semeval_scores
from semdup.reranker.calibration import Calibration

__all__ = ["DATA_NAMES", "DenseEncoder", "FitData", "DefaultFit", "load_fit_data", "idf_pipeline", "dev_groups",
           "write_default_bundle", "fit_default", "INT8_CHOICES", "INT8_MAX_DROP"]

logger = logging.getLogger(__name__)

DATA_NAMES = ("travel", "semeval", "askubuntu")
TOP = 100  # candidates per path, as the Travel protocol and the reranker's default
INT8_CHOICES = ("off", "auto")
# The most the fitted dev figure (MAP points) may drop for the int8 encoder to ship (issue #19): int8 halves the
# CPU per post, a larger drop is not worth it.
INT8_MAX_DROP = 0.3


class DenseEncoder(Protocol):
    """What the fit and gate tools need of an encoder: a :class:`~semdup.bundle.bundle.Bundle`, or a learn run's
    torch model (:class:`semdup.training.learn.encoder.LearnedEncoder`)."""

    version: str  # names the weights (the dense-vector cache keys on it)
    dimension: int | None

    def encode_dense(self, posts: Sequence[Post]) -> np.ndarray | None: ...


@dataclass
class FitData:
    """Labelled queries of one kind (``retrieval``: a dump's split; ``semeval``: a labelled rerank set; ``pairs``):
    what a fusion is fitted on, or what a bundle is judged on (``dev`` names whichever it is)."""

    name: str
    kind: str
    dev: Any  # (StackExchangeDump, split) | SemEvalSet | list[PostPair]
    posts: list[Post]  # every post whose text builds the vocabulary

    @property
    def n_dev(self) -> int:
        if self.kind == "retrieval":
            return len(self.dev[0].queries(self.dev[1]))
        return len(self.dev.questions) if self.kind == "semeval" else len(self.dev)


@dataclass(frozen=True)
class DefaultFit:
    """What :func:`fit_default` wrote and chose."""

    bundle_dir: Path
    version: str
    fusion: dict[str, float]
    dev: float
    measure: str
    threshold: float | None
    n_dev: int
    vocab_size: int
    seconds: float
    quantization: dict[str, Any] | None = None
    flagging: Calibration | None = None  # retrieval data: k, threshold, Platt streamed on dev (default_flagging)
    flagging_file: Path | None = None


def _unique(posts: Sequence[Post]) -> list[Post]:
    return list({p.id: p for p in posts}.values())


def load_fit_data(data: str, corpus: Sequence[Post] = ()) -> FitData:
    """The labelled queries ``data`` names to fit the fusion on (see the module doc), with ``corpus`` added to the
    vocabulary's posts. Training queries where the data has them, so the dev set stays for choosing and checking.

    Raises:
        ConfigError: neither a bundled set's name nor an existing dump folder or ``.jsonl`` pairs file.
    """
    from semdup.data import load_pairs_jsonl, load_semeval_xml, load_stackexchange_dump
    from semdup.data.paths import askubuntu_files, semeval_files, semeval_train_files, travel_dir
    from semdup.data.supervision import supervision_from_semeval

    path = Path(data)
    if data == "travel" or (data not in DATA_NAMES and path.is_dir()):
        dump = load_stackexchange_dump(travel_dir() if data == "travel" else path)
        return FitData(data, "retrieval", (dump, "train"), _unique([*dump.corpus(), *corpus]))
    if data == "semeval":
        sem = supervision_from_semeval(semeval_train_files()).data
        dev = load_semeval_xml(*semeval_files("dev"), name="dev")  # unlabelled text for the IDF, never fitted on
        posts = [q.post for s in (sem, dev) for q in s.questions] + sem.related_posts() + dev.related_posts()
        return FitData(data, "semeval", sem, _unique([*posts, *corpus]))
    if data == "askubuntu" or (path.suffix == ".jsonl" and path.is_file()):
        pairs = load_pairs_jsonl(askubuntu_files()[0] if data == "askubuntu" else path)
        posts = [p for pair in pairs for p in (pair.query, pair.candidate)]
        return FitData(data, "pairs", pairs, _unique([*posts, *corpus]))
    raise ConfigError(f"unknown fit data {data!r}; accepted: {', '.join(DATA_NAMES)}, a Stack Exchange dump folder "
                      "(with splits.tsv) or a .jsonl file of labelled pairs")


def idf_pipeline(base: Bundle, posts: Sequence[Post]) -> tuple[TextPipeline, np.ndarray]:
    """(the base's text pipeline over a vocabulary of ``posts``, idf [|V|] float32; <pad>/<unk> weigh 0)."""
    tokenizer = TextPipeline(base.pipeline.settings, Vocabulary.build([]))
    vocab = Vocabulary.build(tokenizer.text_tokens(p) for p in posts)
    return TextPipeline(base.pipeline.settings, vocab), np.asarray(vocab.idf(), dtype=np.float32)


def _dense(base: DenseEncoder, posts: Sequence[Post], cache_dir: Path | None) -> np.ndarray:
    """Unit dense vectors [N, D] of the base encoder, kept in ``cache_dir`` by content (encoding is the slow part)."""
    if cache_dir is None:
        return base.encode_dense(posts)
    h = hashlib.sha256(base.version.encode())
    for p in posts:
        h.update(json.dumps([p.id, p.title, p.body]).encode("utf-8"))
    path = Path(cache_dir) / f"dense-{h.hexdigest()[:16]}.npy"
    if path.exists():
        return np.load(path, allow_pickle=False)
    x = base.encode_dense(posts)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, x, allow_pickle=False)
    return x


def _titles(base: DenseEncoder, posts: Sequence[Post], cache_dir: Path | None) -> np.ndarray:
    """Unit title vectors [N, D] of the base encoder (zero rows for posts without a title), what the workers
    store and the reranker's query carries for a bundle with a title term."""
    return title_vectors(posts, lambda titles: _dense(base, titles, cache_dir), base.dimension or 0)


def _title_cos(q: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Cosines of unit (or zero) title vectors, rows of ``q`` against rows of ``c`` (0 for a missing title)."""
    return q.astype(np.float64) @ c.astype(np.float64).T


def _retrieval_groups(base: DenseEncoder, pipeline: TextPipeline, idf: np.ndarray, dump: Any, split: str, k: int,
                      knn: bool, cache_dir: Path | None, title: bool = False) -> tuple[list[Group], Any]:
    corpus = dump.corpus()
    ids = [p.id for p in corpus]
    row = {pid: i for i, pid in enumerate(ids)}
    queries = dump.queries(split)
    dense = _dense(base, corpus, cache_dir)
    q_dense = np.stack([dense[row[q.post.id]] if q.post.id in row else base.encode_dense([q.post])[0]
                        for q in queries])
    bow = bow_matrix(pipeline, corpus, idf)
    q_bow = bow_matrix(pipeline, [q.post for q in queries], idf)
    lexical = LexicalIndex.build(pipeline, corpus, kind="bm25").score_matrix(pipeline, [q.post for q in queries])
    cos_dense = q_dense.astype(np.float64) @ dense.astype(np.float64).T  # [Q, N]
    cos_bow = np.asarray((q_bow @ bow.T).todense())
    cos_title = None
    if title:
        t_corpus = _titles(base, corpus, cache_dir)
        t_query = np.stack([t_corpus[row[q.post.id]] if q.post.id in row else _titles(base, [q.post], None)[0]
                            for q in queries])
        cos_title = _title_cos(t_query, t_corpus)
    groups = []
    for i, q in enumerate(queries):
        own = row.get(q.post.id)
        cands = [j for j in np.argsort(-lexical[i], kind="stable")[: k + 1] if j != own and lexical[i, j] > 0][:k]
        if knn:
            seen = set(cands)
            cands += [j for j in np.argsort(-cos_dense[i], kind="stable")[: k + 1] if j != own and j not in seen][:k]
        c = np.asarray(cands, dtype=np.int64)
        groups.append(Group(q.post.id, tuple(ids[j] for j in c), cos_bow[i, c], cos_dense[i, c], lexical[i, c],
                            None if cos_title is None else cos_title[i, c]))
    relevant = {q.post.id: set(q.relevant) for q in queries}

    def measure(preds: dict[str, dict[str, float]]) -> float:
        ranked = {q: sorted(s, key=s.__getitem__, reverse=True)[:TOP] for q, s in preds.items()}
        return retrieval_scores(ranked, relevant, cutoff=TOP)["MAP"]

    return groups, measure


def _semeval_groups(base: DenseEncoder, pipeline: TextPipeline, idf: np.ndarray, sem: Any,
                    title: bool = False) -> tuple[list[Group], Any]:
    related = sem.related_posts()
    index = LexicalIndex.build(pipeline, related, kind="bm25")
    col = {pid: j for j, pid in enumerate(index.ids)}
    originals = [q.post for q in sem.questions]
    lexical = index.score_matrix(pipeline, originals)
    d_orig, d_rel = base.encode_dense(originals), base.encode_dense(related)
    b_orig, b_rel = bow_matrix(pipeline, originals, idf), bow_matrix(pipeline, related, idf)
    rel_row = {p.id: j for j, p in enumerate(related)}
    t_orig, t_rel = (_titles(base, originals, None), _titles(base, related, None)) if title else (None, None)
    groups = []
    for i, q in enumerate(sem.questions):
        rows = np.asarray([rel_row[r.post.id] for r in q.related], dtype=np.int64)
        cols = np.asarray([col[r.post.id] for r in q.related], dtype=np.int64)
        cos_dense = d_rel[rows].astype(np.float64) @ d_orig[i].astype(np.float64)
        cos_bow = np.asarray((b_rel[rows] @ b_orig[i].T).todense()).ravel()
        cos_title = None if t_rel is None else _title_cos(t_rel[rows], t_orig[i : i + 1]).ravel()
        groups.append(Group(q.post.id, tuple(r.post.id for r in q.related), cos_bow, cos_dense, lexical[i, cols],
                            cos_title))
    gold = sem.gold()
    return groups, lambda preds: semeval_scores(preds, gold)["MAP"]


def _pair_groups(base: DenseEncoder, pipeline: TextPipeline, idf: np.ndarray, pairs: Sequence[Any],
                 title: bool = False) -> tuple[list[Group], Any]:
    q, c = [p.query for p in pairs], [p.candidate for p in pairs]
    cos_dense = np.sum(base.encode_dense(q).astype(np.float64) * base.encode_dense(c).astype(np.float64), axis=1)
    cos_bow = np.asarray(bow_matrix(pipeline, q, idf).multiply(bow_matrix(pipeline, c, idf)).sum(axis=1)).ravel()
    cos_title = (np.sum(_titles(base, q, None).astype(np.float64) * _titles(base, c, None).astype(np.float64), axis=1)
                 if title else np.zeros(len(pairs)))
    # the service ranks each pair's candidate alone, so lexnorm is 0 there: the lexical column stays 0
    groups = [Group(str(i), (p.candidate.id,), cos_bow[i : i + 1], cos_dense[i : i + 1], np.zeros(1),
                    cos_title[i : i + 1])
              for i, p in enumerate(pairs)]
    labels = [p.duplicate for p in pairs]

    def measure(preds: dict[str, dict[str, float]]) -> float:
        return best_threshold([next(iter(preds[str(i)].values())) for i in range(len(pairs))], labels)[1]

    return groups, measure


def dev_groups(base: DenseEncoder, pipeline: TextPipeline, idf: np.ndarray, data: FitData, k: int = TOP,
               knn: bool = True, cache_dir: Path | None = None, title: bool = False) -> tuple[list[Group], Any, str]:
    """(dev groups, predictions -> figure, the figure's name) for ``data``'s kind; ``title``: with the title
    vectors' cosine (else zeros)."""
    if data.kind == "retrieval":
        dump, split = data.dev
        return (*_retrieval_groups(base, pipeline, idf, dump, split, k, knn, cache_dir, title), "MAP (top 100)")
    if data.kind == "semeval":
        return (*_semeval_groups(base, pipeline, idf, data.dev, title), "MAP (official, 10 candidates)")
    return (*_pair_groups(base, pipeline, idf, data.dev, title), "pair accuracy at the best threshold")


def write_default_bundle(base_path: str | Path, out_dir: str | Path, pipeline: TextPipeline, idf: np.ndarray,
                         fit: FusionFit, data: str, threshold: float | None = None,
                         quantization: dict[str, Any] | None = None, extra: Mapping[str, Any] | None = None) -> Bundle:
    """The base bundle's encoder and tokenizer + ``vocab.json`` and ``term_weights.npy`` = idf, sealed and verified.

    The manifest keeps the base's ``base_encoder`` record, takes ``architecture = hybrid-<base encoder>`` and
    records the fit (``default_fit``: the weights, their figure on the queries fitted on, the grid) and the data it
    was chosen on. ``extra``: more manifest entries (a learned bundle's ``learn`` record); they join its hash.
    """
    files = read_bundle_files(base_path)
    base_manifest = json.loads(files.pop(MANIFEST_FILE).decode("utf-8"))
    buf = io.BytesIO()
    np.save(buf, np.asarray(idf, dtype=np.float32), allow_pickle=False)
    vocab = pipeline.vocab
    files[VOCAB_FILE] = json.dumps({"n_docs": vocab.n_docs, "tokens": vocab.itos, "df": vocab.df}).encode("utf-8")
    files[TERM_WEIGHTS_FILE] = buf.getvalue()
    files = {name: files[name] for name in base_manifest["files"] if name in files} | {
        VOCAB_FILE: files[VOCAB_FILE], TERM_WEIGHTS_FILE: files[TERM_WEIGHTS_FILE]}
    base_name = (base_manifest.get("base_encoder") or {}).get("name") or base_manifest["architecture"]
    manifest = {k: v for k, v in base_manifest.items() if k not in ("files", "version", "format_version")}
    manifest.update(
        architecture=f"hybrid-{base_name}",
        vocab_size=len(vocab),
        term_weights={"count": int(len(idf)), "nonpositive": int((idf[2:] <= 0).sum()), "source": "idf log(N/df)"},
        fusion=dict(fit.fusion),
        threshold=threshold,
        data=data,
        metrics={"fit": {fit.measure: fit.dev}},
        default_fit={**fit.to_json(), "data": data, "base_bundle": base_manifest["version"]},
        source_checkpoint=None,
    )
    if quantization is not None:
        manifest["quantization"] = quantization
    manifest.update(extra or {})
    write_bundle(out_dir, files, manifest)
    return Bundle.load(out_dir)  # it must verify before anyone gets it


@dataclass(frozen=True)
class _Fitted:
    pipeline: TextPipeline
    idf: np.ndarray
    fit: FusionFit
    measure: str
    threshold: float | None
    flagging: Calibration | None = None


def _fit_on(base_path: str | Path, fit_data: FitData, k: int, knn: bool, cache_dir: Path | None,
            grid: tuple[Sequence[float], Sequence[float]] | None, grid_title: Sequence[float]) -> _Fitted:
    """The fusion (and, for pairs, the threshold) chosen on ``fit_data``'s queries over ``base_path``'s encoder."""
    base = Bundle.load(base_path)
    if base.dimension is None:
        raise ConfigError(f"{base_path} has no dense encoder; give a base encoder's bundle (semdup export "
                          "--base-encoder minilm)")
    pipeline, idf = idf_pipeline(base, fit_data.posts)
    title = any(w != 0.0 for w in grid_title)
    groups, measure, name = dev_groups(base, pipeline, idf, fit_data, k=k, knn=knn, cache_dir=cache_dir, title=title)
    kwargs: dict[str, Any] = {"grid_title": tuple(grid_title)}
    if grid is not None:
        kwargs |= {"grid_bow": grid[0], "grid_alpha": grid[1]}
    fit = choose_fusion(groups, measure, name, **kwargs)
    threshold = None
    if fit_data.kind == "pairs":  # the decision threshold belongs to pair data; chosen on the same pairs
        preds = group_scores(groups, fit.fusion)
        scores = [next(iter(preds[g.query_id].values())) for g in groups]
        threshold = best_threshold(scores, [p.duplicate for p in fit_data.dev])[0]
    flagging = None
    if fit_data.kind == "retrieval":  # every dev post streamed in creation order: semdup.learn.default_flagging
        # the fusion was fitted on the training queries; the flagging threshold is chosen on the held-out dev split
        every = EveryPost(fit_data.dev[0])
        streamed = dev_groups(base, pipeline, idf, replace(fit_data, dev=(every, "dev")), k=k, knn=knn,
                              cache_dir=cache_dir, title=title)[0]
        flagging = flagging_calibration(streamed, fit.fusion, every, "dev")
    return _Fitted(pipeline, idf, fit, name, threshold, flagging)


def fit_default(base_path: str | Path, data: str | FitData, out_dir: str | Path, corpus: Sequence[Post] = (),
                k: int = TOP, knn: bool = True, cache_dir: str | Path | None = None,
                grid: tuple[Sequence[float], Sequence[float]] | None = None,
                grid_title: Sequence[float] = GRID_TITLE, int8: str = "off") -> DefaultFit:
    """Fit the hybrid default on ``data``'s labelled queries (training ones where it has them) and write its bundle.

    Args:
        base_path: a base encoder's bundle (``semdup export --base-encoder NAME``).
        data: a bundled set's name, a dump folder, a ``.jsonl`` pairs file, or loaded :class:`FitData`.
        out_dir: the bundle directory (replaced if it exists).
        corpus: posts to be indexed, added to the vocabulary (no labels read).
        k: candidates per path for retrieval data; knn: add the k nearest dense vectors as the service does.
        cache_dir: keep the corpus's dense vectors here between runs.
        grid: (β_bow values, α values); default :data:`~semdup.learn.fusion_fit.GRID_BOW` / ``GRID_ALPHA``.
        grid_title: β_title values (``(0.0,)``: no title term, and no title vectors computed).
        int8: ``off``, or ``auto``: also fit over the encoder quantised to int8 (``int8-channel``, about half the
            CPU per post) and ship it when its fitted dev figure is at most :data:`INT8_MAX_DROP` below the fp32
            one; both figures and the choice go into ``manifest.quantization`` either way.
    """
    if int8 not in INT8_CHOICES:
        raise ValueError(f"unknown int8 choice {int8!r}; accepted: {', '.join(INT8_CHOICES)}")
    t0 = time.perf_counter()
    fit_data = data if isinstance(data, FitData) else load_fit_data(data, corpus)
    cache = None if cache_dir is None else Path(cache_dir)
    fp32 = _fit_on(base_path, fit_data, k, knn, cache, grid, grid_title)
    if int8 == "off":
        bundle = write_default_bundle(base_path, out_dir, fp32.pipeline, fp32.idf, fp32.fit, fit_data.name,
                                      fp32.threshold)
        return DefaultFit(Path(out_dir), bundle.version, fp32.fit.fusion, fp32.fit.dev, fp32.measure, fp32.threshold,
                          fit_data.n_dev, len(fp32.pipeline.vocab), time.perf_counter() - t0, None, fp32.flagging,
                          save_flagging(out_dir, bundle.version, fp32.flagging))
    import tempfile

    from semdup.export.quantize import quantize_method, quantized_bundle

    mode = "int8-channel"
    with tempfile.TemporaryDirectory(prefix="semdup-int8-base-") as tmp:
        q_base = quantized_bundle(base_path, Path(tmp) / "int8", mode)
        q = _fit_on(q_base, fit_data, k, knn, cache, grid, grid_title)
        chosen = fp32.fit.dev - q.fit.dev <= INT8_MAX_DROP
        quant = {"mode": mode, "method": quantize_method(mode), "eval": f"{fit_data.name} fit, {fp32.measure}",
                 "dev_fp32": fp32.fit.dev, "dev_int8": q.fit.dev, "change": q.fit.dev - fp32.fit.dev,
                 "max_drop": INT8_MAX_DROP, "chosen": chosen, "fusion_fp32": dict(fp32.fit.fusion)}
        logger.info("int8 %s: dev %.2f vs fp32 %.2f (%s)", mode, q.fit.dev, fp32.fit.dev,
                    "shipped" if chosen else "not shipped: more than %.1f below" % INT8_MAX_DROP)
        use, base = (q, q_base) if chosen else (fp32, Path(base_path))
        bundle = write_default_bundle(base, out_dir, use.pipeline, use.idf, use.fit, fit_data.name, use.threshold,
                                      quantization=quant)
    return DefaultFit(Path(out_dir), bundle.version, use.fit.fusion, use.fit.dev, use.measure, use.threshold,
                      fit_data.n_dev, len(use.pipeline.vocab), time.perf_counter() - t0, quant, use.flagging,
                      save_flagging(out_dir, bundle.version, use.flagging))
