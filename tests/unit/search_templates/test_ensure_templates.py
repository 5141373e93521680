"""ensure_templates against a fake client: what it stores, what it leaves alone, and a user who may not store."""

from __future__ import annotations

import logging
from typing import Any

from opensearchpy import exceptions as os_exc

from semdup.opensearch_io.boundary import client_error
from semdup.search_templates import ensure_templates, template_id, template_source
from semdup.search_templates.components import COMPONENTS_SCRIPT, COMPONENTS_SCRIPT_ID, FUSED_SCRIPT, FUSED_SCRIPT_ID


class FakeScripts:
    """The two script endpoints; ``held`` is the cluster's stored scripts."""

    def __init__(self, held: dict[str, str] | None = None, may_put: bool = True) -> None:
        self.held = dict(held or {})
        self.may_put = may_put
        self.puts: list[str] = []

    def get_script(self, id: str, params: Any = None) -> dict[str, Any]:  # noqa: A002 (opensearch-py's name)
        if id not in self.held:
            missing = os_exc.NotFoundError(404, "resource_not_found_exception", {"found": False})
            raise client_error(missing, "GET", f"/_scripts/{id}")  # as the client raises it
        return {"_id": id, "found": True, "script": {"lang": "mustache", "source": self.held[id]}}

    def put_script(self, id: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:  # noqa: A002
        if not self.may_put:
            raise client_error(os_exc.AuthorizationException(403, "security_exception", {}), "PUT", f"/_scripts/{id}")
        self.puts.append(id)
        self.held[id] = body["script"]["source"]
        return {"acknowledged": True}


def test_missing_and_stale_templates_are_stored_and_current_ones_left_alone() -> None:
    bm25, lmj, dfr = (template_id(m, "text") for m in ("bm25", "lmj", "dfr"))
    client = FakeScripts({bm25: template_source("bm25", "text"), lmj: "an older version",
                          COMPONENTS_SCRIPT_ID: COMPONENTS_SCRIPT, FUSED_SCRIPT_ID: FUSED_SCRIPT})  # fmt: skip
    assert ensure_templates(client, ["bm25", "lmj", "dfr"], ["text"]) is True
    assert sorted(client.puts) == sorted([lmj, dfr])
    assert client.held[lmj] == template_source("lmj", "text")
    client.puts.clear()
    assert ensure_templates(client, ["bm25", "lmj", "dfr"], ["text"]) is True
    assert client.puts == []


def test_by_default_every_model_and_variant_is_ensured() -> None:
    client = FakeScripts()
    assert ensure_templates(client) is True
    assert len(client.held) == 14 and template_id("tfidf", "title") in client.held
    assert client.held[COMPONENTS_SCRIPT_ID] == COMPONENTS_SCRIPT  # the fusion's two scripts beside them
    assert client.held[FUSED_SCRIPT_ID] == FUSED_SCRIPT


def test_a_user_who_may_not_store_scripts_gets_a_warning_not_an_error(caplog: Any) -> None:
    client = FakeScripts(may_put=False)
    with caplog.at_level(logging.WARNING):
        assert ensure_templates(client, ["bm25"], ["text"]) is False
    assert "semdup enable" in caplog.text and "cluster:admin/script/put" in caplog.text
