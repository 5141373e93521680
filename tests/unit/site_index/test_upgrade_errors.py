"""``semdup upgrade`` when OpenSearch does not answer, and its command line: errors that say what to do."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from semdup.core.errors import OpenSearchUnavailable
from semdup.opensearch_io.boundary import MappedTransport, OpenSearch
from semdup.site_index.upgrade import remove_old, upgrade


class _Bundle:
    version, dimension = "model-b", 8

    def document_fields(self, posts: Any) -> list[dict[str, Any]]:
        raise AssertionError("nothing is encoded when the cluster is down")


def _down() -> OpenSearch:
    # the discard port: refused; the transport of every client semdup builds (it raises semdup's errors)
    return OpenSearch(hosts=["http://127.0.0.1:9"], max_retries=0, timeout=2, transport_class=MappedTransport)


def test_cluster_down_says_run_again_it_resumes() -> None:
    with pytest.raises(OpenSearchUnavailable, match="run the same command again: it resumes"):
        upgrade(_down(), "site-posts", _Bundle(), progress=False)
    with pytest.raises(OpenSearchUnavailable, match="removing the old companions"):
        remove_old(_down(), "site-posts")


def test_cli_needs_a_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    from semdup.cli import upgrade_cmd

    monkeypatch.delenv("SEMDUP_BUNDLE", raising=False)
    monkeypatch.setattr(upgrade_cmd, "_client", lambda: _down())
    got = CliRunner().invoke(upgrade_cmd.upgrade, ["--alias", "site-posts"])
    assert got.exit_code == 2 and "pass --bundle PATH or set SEMDUP_BUNDLE" in got.output
