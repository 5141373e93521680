"""How ``create`` and ``remove`` meet ml-commons' passing failures: a deploy whose nodes time out reading the
master key or find a duplicate deploy task (the multi-node CI run: ``pipeline create`` failed so), and a connector
delete refused for a model of *another* connector (ml-commons matches connector ids word by word). ml-commons is
a script of answers here; the same steps run on real nodes in tests/integration/test_search_pipeline_ops.py and
test_multi_node.py."""

from __future__ import annotations

from typing import Any

import pytest

from semdup.core.errors import OpenSearchRefused, OpenSearchUnavailable
from semdup.search_pipeline import setup
from semdup.search_pipeline.setup import PipelineState


class MlCommons:
    """Answers ``_call`` from scripts keyed by a part of the path: each entry is returned (or raised) in turn, the
    last one kept."""

    def __init__(self, scripts: dict[str, list[Any]]) -> None:
        self.scripts = scripts
        self.calls: list[tuple[str, str]] = []

    def __call__(self, client: Any, method: str, path: str, body: Any = None, params: Any = None) -> Any:
        self.calls.append((method, path))
        key = next(k for k in self.scripts if k in path)
        script = self.scripts[key]
        answer = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def count(self, method: str, part: str) -> int:
        return sum(1 for m, p in self.calls if m == method and part in p)


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(setup.time, "sleep", lambda s: None)


def test_a_deploy_whose_nodes_time_out_on_the_master_key_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    ml = MlCommons({"/_deploy": [{"task_id": "t1"}, {"task_id": "t2"}],
                   "/tasks/": [{"state": "FAILED", "error": {"n1": "Fetching master key timed out."}},
                          {"state": "COMPLETED"}],
                   "/models/m": [{"model_state": "DEPLOY_FAILED"}]})  # fmt: skip
    monkeypatch.setattr(setup, "_call", ml)
    setup._deploy(object(), "m")
    assert ml.count("POST", "/_deploy") == 2


def test_any_other_deploy_failure_is_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ml = MlCommons({"/_deploy": [{"task_id": "t1"}],
                    "/tasks/": [{"state": "FAILED", "error": {"n1": "Connection refused"}}],
                   "/models/m": [{"model_state": "DEPLOY_FAILED"}]})  # fmt: skip
    monkeypatch.setattr(setup, "_call", ml)
    with pytest.raises(OpenSearchUnavailable, match="Connection refused"):
        setup._deploy(object(), "m")
    assert ml.count("POST", "/_deploy") == 1


def test_a_passing_failure_that_lasts_is_raised_after_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    ml = MlCommons({"/_deploy": [{"task_id": "t"}],
                    "/tasks/": [{"state": "FAILED", "error": "Fetching master key timed out."}],
                   "/models/m": [{"model_state": "DEPLOY_FAILED"}]})  # fmt: skip
    monkeypatch.setattr(setup, "_call", ml)
    monkeypatch.setattr(setup, "ML_RETRY_S", 0.0)
    with pytest.raises(OpenSearchUnavailable, match="master key"):
        setup._deploy(object(), "m")


def _in_use(*models: str) -> OpenSearchRefused:
    reason = f"{len(models)} models are still using this connector, please delete or update the models first: " \
             f"[{', '.join(models)}]"
    return OpenSearchRefused(f"OpenSearch refused DELETE (HTTP 409: {reason})", status=409, reason=reason)


def test_a_connector_refused_for_another_connectors_model_is_left_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hit = {"_id": "Yx-SOKIBE8gJIYH-WfPs", "_source": {"connector_id": "Qq-SOKIBE8gJIYH-abcd"}}
    ml = MlCommons({"/connectors/": [_in_use("Yx-SOKIBE8gJIYH-WfPs")], "/models/_search": [{"hits": {"hits": [hit]}}]})
    monkeypatch.setattr(setup, "_call", ml)
    monkeypatch.setattr(setup, "CONNECTOR_DELETE_WAIT_S", 0.0)
    state = PipelineState("p", connector_id="ZR-SOKIBE8gJIYH-cPN3")
    assert setup._delete_connector(object(), state) is False
    assert "connector ZR-SOKIBE8gJIYH-cPN3 left" in state.warnings[0]


def test_a_connector_its_own_model_still_uses_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    hit = {"_id": "m", "_source": {"connector_id": "c"}}
    ml = MlCommons({"/connectors/": [_in_use("m")], "/models/_search": [{"hits": {"hits": [hit]}}]})
    monkeypatch.setattr(setup, "_call", ml)
    monkeypatch.setattr(setup, "CONNECTOR_DELETE_WAIT_S", 0.0)
    with pytest.raises(OpenSearchRefused, match="still using"):
        setup._delete_connector(object(), PipelineState("p", connector_id="c"))


def test_a_connector_is_deleted_once_its_deleted_model_is_no_longer_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    ml = MlCommons({"/connectors/": [_in_use("m"), _in_use("m"), {"result": "deleted"}]})
    monkeypatch.setattr(setup, "_call", ml)
    assert setup._delete_connector(object(), PipelineState("p", connector_id="c")) is True
    assert ml.count("DELETE", "/connectors/c") == 3


def test_describe_takes_the_connector_its_model_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    found = {"connectors": [{"_id": "left", "parameters": {}}, {"_id": "used", "parameters": {}}],
             "models": [{"_id": "m", "connector_id": "used", "model_state": "DEPLOYED"}], "model_groups": []}
    monkeypatch.setattr(setup, "_find", lambda client, kind, name: [dict(x) for x in found[kind]])
    monkeypatch.setattr(setup, "_get_pipeline", lambda client, name: None)
    monkeypatch.setattr(setup, "_defaults_of", lambda client, name, index: [])
    assert setup.describe(object(), "site").connector_id == "used"


def test_a_connector_create_whose_node_times_out_on_the_master_key_is_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timed_out = OpenSearchRefused("OpenSearch refused POST (HTTP 500: m_l_exception: Fetching master key timed out.)",
                                  status=500, reason="Fetching master key timed out.")  # fmt: skip
    ml = MlCommons({"/connectors/_create": [timed_out, {"connector_id": "c"}]})
    monkeypatch.setattr(setup, "_call", ml)
    made = setup._passing_retried(lambda: setup._call(object(), "POST", "/_plugins/_ml/connectors/_create"), "x")
    assert made == {"connector_id": "c"} and ml.count("POST", "/connectors/_create") == 2
