"""The one text pipeline that training and serving share, so their token ids cannot drift.

Torch-free on purpose: Celery workers and the reranker import this module with numpy only.
It follows the papers' preprocessing (Bogdanova et al. 2015, §3; dos Santos et al. 2015, §4):
HTML stripped, code blocks removed, every URL replaced by one token, NLTK tokenisation and
lower-casing. SCQA's letter-trigram word hashing (Das et al. 2016, §3.1) lives here too.

Example::

    >>> p = TextPipeline(TextPipelineSettings())
    >>> p.tokens("How do I <b>mount</b> http://x.org/a ?")
    ['how', 'do', 'i', 'mount', 'urltoken', '?']
"""

from __future__ import annotations

import html
import json
import math
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import regex

from semdup.core.errors import DataError, PostError
from semdup.core.posts import Post

__all__ = [
    "TextPipelineSettings",
    "TextPipeline",
    "Vocabulary",
    "clean_text",
    "check_post",
    "has_visible_text",
    "INVISIBLE_CHARS",
    "PAD_ID",
    "UNK_ID",
]

PAD_ID = 0
UNK_ID = 1

# One regular expression, applied by NLTK's RegexpTokenizer: words that may hold inner
# apostrophes, hyphens, dots or slashes ("don't", "12.04", "wi-fi"), else single symbols.
TOKEN_PATTERN = r"\w+(?:['\-./]\w+)*|[^\w\s]"
TOKEN_FLAGS = re.UNICODE | re.MULTILINE | re.DOTALL  # RegexpTokenizer's defaults

_CODE_BLOCK = re.compile(r"<pre\b[^>]*>.*?</pre>", re.S | re.I)
_TAG = re.compile(r"<[^>]+>")
_URL = re.compile(r"(?:https?://|ftp://|www\.)[^\s<>\"')\]]+", re.I)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")

# Above this many characters a field is cut before tokenising: max_tokens never needs more,
# and a megabyte post must not stall a worker.
MAX_FIELD_CHARS = 100_000
_CHARS_PER_TOKEN_BUDGET = 12  # prefix length per wanted token before falling back to the whole text


@dataclass(frozen=True)
class TextPipelineSettings:
    """Everything that changes a token id; saved in every checkpoint and bundle.

    Args:
        lowercase: lower-case before tokenising (all four papers do).
        html: field text may be HTML (Stack Exchange bodies); tags are stripped.
        drop_code: remove ``<pre>`` code blocks (Bogdanova et al. §3). Inline ``<code>`` keeps its text.
        url_token: the one token every URL becomes.
        max_tokens: tokens kept per field (title, body) after cleaning.
        trigram_buckets: size of the letter-trigram hash space for SCQA; 0 disables hashing.
        max_trigrams_per_word: trigrams kept per word (longer words are cut) for fixed-width tensors.
    """

    lowercase: bool = True
    html: bool = True
    drop_code: bool = True
    url_token: str = "urltoken"
    max_tokens: int = 200
    trigram_buckets: int = 0
    max_trigrams_per_word: int = 16
    tokenizer: str = field(default="nltk-regexp:" + TOKEN_PATTERN)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TextPipelineSettings:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise DataError(f"unknown text-pipeline settings {unknown}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**known)


def clean_text(text: str, settings: TextPipelineSettings) -> str:
    """HTML, code blocks and URLs handled as the papers do; returns plain text."""
    if len(text) > MAX_FIELD_CHARS * 4:
        text = text[: MAX_FIELD_CHARS * 4]
    if settings.html and "<" in text:
        if settings.drop_code:
            text = _CODE_BLOCK.sub(" ", text)
        text = _TAG.sub(" ", text)
    if "&" in text:
        text = html.unescape(text)
    # Cheap substring tests first: the URL pattern scans every position, and most posts hold no URL.
    if "://" in text or "www." in text or "WWW." in text:
        text = _URL.sub(f" {settings.url_token} ", text)
    text = _CONTROL.sub(" ", text)
    return " ".join(text.split())[:MAX_FIELD_CHARS]


# Invisible characters: Unicode's default-ignorable code points of the Basic Multilingual Plane (soft hyphen,
# zero-width spaces and joiners, bidi controls, word joiners, variation selectors, Hangul fillers, U+FEFF), as the
# inside of a [...] class written with escapes, so that the request schema states the same set
# (semdup.core.post_rules.VISIBLE_PATTERN: a Python and an ECMA-262 expression alike).
INVISIBLE_CHARS = (
    r"\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164"
    r"\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
)
_SHOWN = re.compile(rf"[^\s\x85{INVISIBLE_CHARS}]")


def has_visible_text(text: str) -> bool:
    """Whether ``text`` holds a visible character once cleaned as the index stores it (:func:`clean_text` with the
    default settings: tags and ``<pre>`` code blocks dropped, entities decoded, control characters blanked): one that
    is neither white space nor invisible (:data:`INVISIBLE_CHARS`: zero-width spaces, bidi controls, U+FEFF ...). A
    title of zero-width spaces, or a body of only code, would otherwise be stored as nothing."""
    return _SHOWN.search(clean_text(text, _DEFAULTS)) is not None


_DEFAULTS = TextPipelineSettings()


def check_post(post: Post) -> None:
    """Refuse a post that cannot be indexed or scored, with a message that says why.

    A post with only a title or only a body is normal. Binary content (many control
    characters or replacement characters from undecodable bytes) is refused rather than
    turned into noise tokens.
    """
    if not (post.title or "").strip() and not (post.body or "").strip():
        raise PostError(f"post {post.id!r} has neither title nor body; give at least one of them")
    sample = (post.title or "")[:2000] + (post.body or "")[:8000]
    bad = len(_CONTROL.findall(sample))
    if sample and bad / len(sample) > 0.1:
        raise PostError(
            f"post {post.id!r} looks binary ({bad} control or undecodable characters in the first "
            f"{len(sample)}); send UTF-8 text"
        )
    if not has_visible_text(post.title or "") and not has_visible_text(post.body or ""):
        # Same fate as an empty post: encoded, it would be a zero vector that matches nothing.
        raise PostError(f"post {post.id!r} has no text, only white space or markup; give a title or a body")


class _TokenIds(dict):
    """token -> id; an unknown token maps to UNK_ID without being added."""

    def __missing__(self, token: str) -> int:
        return UNK_ID


class Vocabulary:
    """Token ↔ id map with document frequencies, so BOW-CNN's t can start at IDF.

    Id 0 is padding and id 1 the unknown token. ``idf[i] = log(n_docs / df[i])`` as in
    dos Santos et al. 2015, §3.2 (unknown and padding get 0).
    """

    def __init__(self, tokens: Sequence[str], df: Sequence[int], n_docs: int) -> None:
        if len(tokens) != len(df):
            raise DataError(f"vocabulary has {len(tokens)} tokens but {len(df)} document frequencies")
        self.itos: list[str] = list(tokens)
        self.df: list[int] = list(df)
        self.n_docs = int(n_docs)
        self.stoi: dict[str, int] = _TokenIds((t, i) for i, t in enumerate(self.itos))

    def __len__(self) -> int:
        return len(self.itos)

    @classmethod
    def build(cls, documents: Iterable[Sequence[str]], min_df: int = 1, max_size: int | None = None) -> Vocabulary:
        """Build from tokenised documents; order is by descending df then token, so it is deterministic."""
        df: Counter[str] = Counter()
        n = 0
        for doc in documents:
            n += 1
            df.update(set(doc))
        items = sorted(((t, c) for t, c in df.items() if c >= min_df), key=lambda x: (-x[1], x[0]))
        if max_size is not None:
            items = items[: max(0, max_size - 2)]
        return cls(["<pad>", "<unk>"] + [t for t, _ in items], [0, 0] + [c for _, c in items], n)

    def idf(self) -> list[float]:
        return [0.0 if i < 2 or c == 0 else math.log(self.n_docs / c) for i, c in enumerate(self.df)]

    def ids(self, tokens: Sequence[str]) -> list[int]:
        # map() over the dict's C-level __getitem__: the hot loop of every worker; unknowns hit __missing__.
        return list(map(self.stoi.__getitem__, tokens))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(
            json.dumps({"n_docs": self.n_docs, "tokens": self.itos, "df": self.df}), encoding="utf-8"
        )

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(d["tokens"], d["df"], d["n_docs"])
        except (OSError, ValueError, KeyError) as exc:
            raise DataError(f"cannot read vocabulary {path}: {exc}") from exc


@lru_cache(maxsize=200_000)
def _word_trigrams(word: str, buckets: int, width: int) -> tuple[int, ...]:
    w = f"#{word}#"
    grams = [w[i : i + 3] for i in range(max(1, len(w) - 2))][:width]
    # crc32, not hash(): Python's str hash is salted per process and would differ between workers.
    return tuple(zlib.crc32(g.encode("utf-8")) % buckets + 1 for g in grams)


class TextPipeline:
    """Post → tokens → ids, identical in training, export parity checks, workers and reranker."""

    def __init__(self, settings: TextPipelineSettings, vocab: Vocabulary | None = None) -> None:
        self.settings = settings
        self.vocab = vocab
        # NLTK's RegexpTokenizer defines the tokenisation: findall of the pattern, compiled by the `regex`
        # engine with its flags. Its per-call timeout wrapper (nltk.redos, a guard against caller-supplied
        # patterns) halves throughput on the hot path; our fixed pattern is linear, so the same engine, pattern
        # and flags run without it, and NLTK itself is not needed (semdup[test] has it for the check).
        # tests/unit/core/test_text_pipeline.py checks the tokens are identical to NLTK's.
        compiled = regex.compile(TOKEN_PATTERN, TOKEN_FLAGS)
        self._findall = compiled.findall
        self._finditer = compiled.finditer

    def tokens(self, text: str) -> list[str]:
        return self._tokenize_clean(clean_text(text or "", self.settings))

    def _tokenize_clean(self, text: str) -> list[str]:
        s = self.settings
        n = s.max_tokens
        # Tokenise a prefix first: if it holds more than n tokens, its first n are complete and equal the
        # full text's first n (only the last token can be cut at the boundary). Else tokenise everything.
        budget = n * _CHARS_PER_TOKEN_BUDGET
        if len(text) > budget:
            head = text[:budget].lower() if s.lowercase else text[:budget]
            tokens = self._findall(head)
            if len(tokens) > n:
                return tokens[:n]
        if s.lowercase:
            text = text.lower()
        return self._findall(text)[:n]

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """``(start, end, token)`` of every token of ``text`` as it stands (no cleaning, no cut at ``max_tokens``),
        the token lower-cased when the pipeline lower-cases: where a shown text's tokens are (the review page marks
        the terms two posts share with it)."""
        lower = self.settings.lowercase
        return [(m.start(), m.end(), m.group().lower() if lower else m.group()) for m in self._finditer(text)]

    def post_tokens(self, post: Post) -> tuple[list[str], list[str]]:
        """(title tokens, body tokens)."""
        return self.tokens(post.title), self.tokens(post.body)

    def text_tokens(self, post: Post) -> list[str]:
        """Title then body, cut to max_tokens: the combined text BOW-CNN and the CNNs read."""
        # One tokeniser call over "title body": no token spans white space, so this equals
        # (tokens(title) + tokens(body))[:max_tokens] at half the calls (the worker's hot path).
        title = clean_text(post.title or "", self.settings)
        body = clean_text(post.body or "", self.settings)
        return self._tokenize_clean(f"{title} {body}" if title and body else title or body)

    def ids(self, tokens: Sequence[str]) -> list[int]:
        if self.vocab is None:
            raise DataError("this text pipeline has no vocabulary; build one with Vocabulary.build or load a bundle")
        return self.vocab.ids(tokens)

    def trigram_ids(self, tokens: Sequence[str]) -> list[tuple[int, ...]]:
        """Letter-trigram hash ids per word (SCQA word hashing), ids in 1..trigram_buckets."""
        s = self.settings
        if s.trigram_buckets <= 0:
            raise DataError("letter-trigram hashing is off (trigram_buckets=0) in these pipeline settings")
        return [_word_trigrams(t, s.trigram_buckets, s.max_trigrams_per_word) for t in tokens]

    def term_frequencies(self, tokens: Sequence[str]) -> dict[int, int]:
        """Bag of words over vocabulary ids, unknown and padding left out (BOW-CNN's tf(q))."""
        counts = Counter(self.ids(tokens))
        counts.pop(UNK_ID, None)
        counts.pop(PAD_ID, None)
        return dict(counts)
