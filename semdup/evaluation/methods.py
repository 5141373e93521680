"""What ``--method`` names: a lexical model run by its search template, or a trained scorer.

    bm25 | lmj | lmd | dfr | ib | tfidf     a stored search template on OpenSearch
    checkpoint:DIR                          a torch checkpoint from ``semdup train`` (needs the train extra)
    bundle:PATH                             an exported ONNX model bundle (onnxruntime only)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from semdup.core.errors import ConfigError
from semdup.core.scoring import PostScorer
from semdup.index_format.schema import LEXICAL_MODELS

__all__ = ["Method", "parse_method", "load_scorer", "METHOD_HELP"]

METHOD_HELP = f"{' | '.join(LEXICAL_MODELS)} | checkpoint:DIR | bundle:PATH"


@dataclass(frozen=True)
class Method:
    kind: str  # "lexical", "checkpoint" or "bundle"
    name: str  # the lexical model, or the text the user gave
    path: Path | None = None

    @property
    def lexical(self) -> bool:
        return self.kind == "lexical"


def parse_method(text: str) -> Method:
    """``"bm25"`` → lexical; ``"checkpoint:artifacts/x"`` → checkpoint; ``"bundle:x.tar"`` → bundle."""
    text = text.strip()
    if text in LEXICAL_MODELS:
        return Method("lexical", text)
    kind, sep, rest = text.partition(":")
    if sep and kind in ("checkpoint", "bundle") and rest:
        path = Path(rest).expanduser()
        if not path.exists():
            raise ConfigError(f"{kind} {str(path)!r} does not exist; give the directory or file that "
                              f"`semdup {'train' if kind == 'checkpoint' else 'export'}` wrote")
        return Method(kind, text, path)
    raise ValueError(f"unknown method {text!r}; accepted: {METHOD_HELP}")


def load_scorer(method: Method, progress: bool = False) -> PostScorer:
    """The scorer behind a checkpoint or bundle method (imports torch only for checkpoints)."""
    if method.kind == "checkpoint":
        try:
            from semdup.training.checkpoint import CheckpointScorer
        except ImportError as exc:  # torch missing
            raise ConfigError(f'checkpoint methods need torch: pip install "semdup[train]" ({exc})') from exc
        return CheckpointScorer.from_dir(method.path, progress=progress)
    if method.kind == "bundle":
        from semdup.bundle import BundleScorer

        return BundleScorer.load(method.path)
    raise ValueError(f"method {method.name!r} is lexical; it has no scorer")
