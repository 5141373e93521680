"""The record every part passes around: a question post with an id, a title and a body."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Post"]


@dataclass(frozen=True)
class Post:
    """A question post as it comes from a data set or a client.

    ``body`` may be HTML (Stack Exchange) or plain text (SemEval); the text pipeline cleans it.
    A post with only a title or only a body is normal; one with neither is refused where it
    is used (``PostError``), never silently dropped.
    """

    id: str
    title: str = ""
    body: str = ""

    def to_json(self) -> dict[str, str]:
        """JSON-native form, for Celery payloads and JSONL files."""
        return {"id": self.id, "title": self.title, "body": self.body}

    @classmethod
    def from_json(cls, obj: dict) -> Post:
        return cls(id=str(obj["id"]), title=str(obj.get("title") or ""), body=str(obj.get("body") or ""))
