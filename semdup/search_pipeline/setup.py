"""semdup's ranking inside the site's own ``_search``: one ml-commons remote model and one search pipeline.

``semdup pipeline create --index site-posts --service-url URL`` puts, in this order (every step idempotent: an
object that exists with the wanted configuration is kept, one that differs is replaced)::

    cluster settings   the connector URL trusted, private addresses allowed where the service has one
                       (:mod:`.cluster_settings`; what it changed is recorded on the connector)
    connector          semdup-<index>: POST <service>/v1/search/rewrite with the search key as a bearer token
                       (``credential``: ml-commons keeps it encrypted and never returns it), explicit timeouts
    remote model       semdup-<index>: registered on the connector and deployed
    search pipeline    semdup-<index>: one ``ml_inference`` request processor. It sends the whole search body
                       (``input_map`` ``$``) and puts the ``query`` semdup answers in place of the site's
                       (``output_map``); ``ignore_failure`` (the default, ``--on-failure original``) runs the site's
                       search unchanged when semdup is down, slow or refuses the search
    default pipeline   with ``--default``: ``index.search.default_pipeline`` of the site's index, so a plain
                       ``GET site-posts/_search`` goes through it

:func:`remove` undoes every step it finds: the model's group too, and of the cluster settings ``create`` changed
only those no other semdup pipeline needs (a later ``create`` whose connector needs a change an earlier one made
records it too, so the last ``remove`` takes it back). ``create`` and ``remove`` of one name hold a lock (a document
of ``semdup-locks`` made with ``op_type=create``): two run at once end in one state, the second finding the first's
objects, with no orphan connector. ``create`` ends with one warm-up search through the pipeline, so the site's
first search does not pay the connector's and the service's first-call costs (1.4 s against a 1 s timeout in the
#45 probe), and warns when the cluster has no security plugin (ml-commons' master key is then readable by anyone
who can search the cluster, so is the connector's key). :func:`describe` reads the state back. Timeouts are whole
seconds on clusters before 3.6 (where ml-commons reads the values as seconds) and milliseconds from 3.6 on.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from semdup.core.errors import ConfigError, OpenSearchMissing, OpenSearchRefused, OpenSearchUnavailable
from semdup.index_format.companion import companion_of
from semdup.index_format.system_indices import LOCKS, ensure
from semdup.search_pipeline.cluster_settings import (
    SettingsChange,
    apply_settings,
    is_private,
    matches,
    needed_settings,
    restore_body,
)

__all__ = ["PipelineSection", "PipelineSpec", "PipelineState", "REWRITE_PATH", "NO_SECURITY_WARNING", "create",
           "remove", "describe", "describe_connector", "names", "connector_body", "pipeline_body",
           "pipeline_lock"]  # fmt: skip

logger = logging.getLogger(__name__)

REWRITE_PATH = "/v1/search/rewrite"  # the service endpoint the connector calls (semdup.service.routers.pipeline)
_ML = "/_plugins/_ml"
_ADDED_REGEX = "semdup_added_trusted_regex"  # connector parameters: what create changed in the cluster settings
_WAS_DEFAULT = "semdup_trusted_was_default"
_SET_PRIVATE = "semdup_enabled_private_ip"
_SPEC = "semdup_spec"
_RECORDED = (_ADDED_REGEX, _WAS_DEFAULT, _SET_PRIVATE, _SPEC)
LOCK_WAIT_S = 180.0  # how long a create or remove waits for another one of the same name
LOCK_STALE_S = 600.0  # a lock older than this was left by a killed process: taken over
NO_SECURITY_WARNING = (
    "this cluster has no security plugin: ml-commons keeps its master key in the .plugins-ml-config index, so "
    "anyone who can search the cluster can decrypt the connector's key; install the security plugin (or keep the "
    "cluster's port private) and give the connector a key with the search scope only (docs/operations.md, "
    '"semdup inside _search")'
)


class PipelineSection(BaseModel):
    """semdup inside the site's ``_search`` (the tree's ``pipeline:`` section, ``semdup pipeline create``'s
    defaults): the service URL the cluster calls, how long it waits for it, and what a search does when semdup
    fails (its own query, or an error)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    service_url: str | None = None
    timeout: float = 1.0
    on_failure: Literal["original", "error"] = "original"

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if not 0 < value <= 60:
            raise ConfigError(f"SEMDUP_PIPELINE_TIMEOUT must be seconds within (0, 60], found {value!r}; e.g. 1")
        return value


class PipelineSpec(PipelineSection):
    """What ``semdup pipeline create`` sets up for one index: the pipeline section's fields (inherited), a service
    URL required, and the index's own.

    Attributes:
        index: the site's index (or alias) its searches run on.
        service_url: semdup's service as the cluster reaches it (``http://10.0.0.5:8080``).
        timeout: seconds the cluster waits for semdup (connect and read each) before it gives up on it.
        on_failure: ``original``: the search runs as the site sent it when semdup fails; ``error``: it fails.
        default: make the pipeline the index's default search pipeline.
        name: the connector's, model's and pipeline's name (default ``semdup-<index>``).
    """

    service_url: str
    index: str
    default: bool = False
    name: str | None = None

    @field_validator("service_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ConfigError(f"the service URL must start with http:// or https://, not {value!r}")
        return value

    @property
    def object_name(self) -> str:
        return self.name or f"semdup-{self.index}"

    def fingerprint(self) -> str:
        """What a connector records of the spec it was made from (no key): equal ones need no new connector."""
        return json.dumps({"url": self.service_url.rstrip("/"), "index": self.index, "timeout": self.timeout},
                          sort_keys=True)  # fmt: skip


@dataclass
class PipelineState:
    """What the cluster holds for one pipeline name (:func:`describe`), and what a call did (``actions``)."""

    name: str
    connector_id: str | None = None
    model_id: str | None = None
    model_state: str | None = None
    pipeline: dict[str, Any] | None = None
    default_of: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)
    model_group_ids: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "connector_id": self.connector_id, "model_id": self.model_id,
                "model_state": self.model_state, "model_group_ids": self.model_group_ids,
                "pipeline": self.pipeline is not None, "default_of": self.default_of, "settings": self.settings,
                "actions": self.actions, "warnings": self.warnings}  # fmt: skip


def text_fields(client: Any, index: str) -> tuple[str, str]:
    """The title and body fields of ``index``: the site's own for a connected index, else semdup's."""
    found = companion_of(client, index)
    return (found[1].title, found[1].body) if found is not None else ("title", "body")


def names(index: str) -> str:
    """The default name of the connector, model and pipeline of ``index``."""
    return f"semdup-{index}"


def _call(client: Any, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
    return client.transport.perform_request(method, path, body=body, params=params or {})


def _version(client: Any) -> tuple[int, int]:
    number = str(client.info()["version"]["number"])
    major, minor = (int(x) for x in number.split(".")[:2])
    return major, minor


def _timeout_value(seconds: float, version: tuple[int, int]) -> int:
    """ml-commons reads connector timeouts as seconds before 3.6 and as milliseconds from 3.6."""
    if version >= (3, 6):
        return max(1, int(round(seconds * 1000)))
    return max(1, math.ceil(seconds))


def connector_body(spec: PipelineSpec, key: str, version: tuple[int, int], change: SettingsChange) -> dict[str, Any]:
    """The connector: the rewrite endpoint with the key as a bearer token (``credential``), explicit timeouts and
    no retries (a retry would double the time a search waits on a down service)."""
    timeout = _timeout_value(spec.timeout, version)
    parameters = {_SPEC: spec.fingerprint()}
    if change.added:
        parameters[_ADDED_REGEX] = change.added
        parameters[_WAS_DEFAULT] = str(change.trusted_was_default).lower()
    if change.private_ip:
        parameters[_SET_PRIVATE] = "true"
    body = json.dumps({"index": spec.index})[:-1] + ', "search": ${parameters.search}}'
    return {
        "name": spec.object_name,
        "description": f"semdup: duplicate-question ranking of {spec.index} (semdup pipeline create)",
        "version": 1,
        "protocol": "http",
        "parameters": parameters,
        "credential": {"key": key},
        "client_config": {"connection_timeout": timeout, "read_timeout": timeout, "max_connection": 32,
                          "max_retry_times": 0},  # fmt: skip
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "url": spec.service_url.rstrip("/") + REWRITE_PATH,
            "headers": {"Authorization": "Bearer ${credential.key}", "Content-Type": "application/json"},
            "request_body": body,
        }],
    }


def pipeline_body(spec: PipelineSpec, model_id: str) -> dict[str, Any]:
    """The search pipeline: one ``ml_inference`` request processor (module doc)."""
    return {
        "description": f"semdup: {spec.index}'s searches ranked by semdup (semdup pipeline create)",
        "request_processors": [{"ml_inference": {
            "tag": "semdup",
            "description": "the site's search body to semdup, semdup's ranking back as its query",
            "model_id": model_id,
            "function_name": "remote",
            "input_map": [{"search": "$"}],
            "output_map": [{"query": "query"}],
            "ignore_failure": spec.on_failure == "original",
        }}],
    }


def _find(client: Any, kind: str, name: str) -> list[dict[str, Any]]:
    """The connectors or models (``kind``) named ``name`` (an exact term on ``name.keyword``)."""
    body = {"size": 100, "query": {"term": {"name.keyword": name}}}
    try:
        got = _call(client, "POST", f"{_ML}/{kind}/_search", body)
    except (OpenSearchMissing, OpenSearchRefused) as exc:
        if isinstance(exc, OpenSearchMissing) or exc.status in (400, 404):  # no such system index yet
            return []
        raise
    hits = (got.get("hits") or {}).get("hits") or []
    return [{"_id": h["_id"], **(h.get("_source") or {})} for h in hits if (h.get("_source") or {}).get("name") == name]


def _wait_task(client: Any, task_id: str, what: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = _call(client, "GET", f"{_ML}/tasks/{task_id}")
        if task.get("state") == "COMPLETED":
            return task
        if task.get("state") in ("FAILED", "COMPLETED_WITH_ERROR"):
            error = str(task.get("error"))
            raise OpenSearchUnavailable(f"ml-commons could not {what}: {error[:300]}", reason=error)
        time.sleep(0.3)
    raise OpenSearchUnavailable(f"ml-commons did not {what} within {timeout:.0f} s (task {task_id})")


def _get_pipeline(client: Any, name: str) -> dict[str, Any] | None:
    try:
        return _call(client, "GET", f"/_search/pipeline/{name}").get(name)
    except OpenSearchMissing:
        return None


def _defaults_of(client: Any, name: str, index: str) -> list[str]:
    """The concrete indices behind ``index`` whose default search pipeline is ``name``."""
    got = client.indices.get_settings(index=index, name="index.search.default_pipeline")
    return sorted(k for k, v in got.items() if (v.get("settings") or {}).get("index", {}).get("search", {}).get(
        "default_pipeline") == name)  # fmt: skip


def describe(client: Any, index: str, name: str | None = None) -> PipelineState:
    """What the cluster holds of ``index``'s pipeline: connector, model and its state, pipeline, default."""
    state = PipelineState(name or names(index))
    connectors = _find(client, "connectors", state.name)
    models = _find(client, "models", state.name)
    if models:
        state.model_id, state.model_state = models[0]["_id"], models[0].get("model_state")
    # the model's own connector first: one ml-commons refused to delete (:func:`_delete_connector`) may linger
    connectors.sort(key=lambda c: c["_id"] != (models[0].get("connector_id") if models else None))
    state.connector_id = connectors[0]["_id"] if connectors else None
    state.model_group_ids = [g["_id"] for g in _find(client, "model_groups", state.name)]
    state.pipeline = _get_pipeline(client, state.name)
    state.default_of = _defaults_of(client, state.name, index)
    if connectors:
        params = connectors[0].get("parameters") or {}
        state.settings = {k: v for k, v in params.items() if k in _RECORDED}
    return state


def describe_connector(client: Any, name: str) -> dict[str, Any]:
    """The connector ``name`` as ml-commons shows it (never its credential).

    Raises:
        ConfigError: there is none (run ``semdup pipeline create``).
    """
    found = _find(client, "connectors", name)
    if not found:
        raise ConfigError(f"no connector {name!r} in this cluster; run `semdup pipeline create` first")
    return _call(client, "GET", f"{_ML}/connectors/{found[0]['_id']}")


def _undeploy_and_delete(client: Any, model_id: str) -> None:
    try:
        _call(client, "POST", f"{_ML}/models/{model_id}/_undeploy")
    except OpenSearchRefused as exc:
        logger.info("model %s was not deployed: %s", model_id, exc)
    _call(client, "DELETE", f"{_ML}/models/{model_id}")


def _delete_groups(client: Any, state: PipelineState) -> None:
    """Delete the model groups named as the pipeline (ml-commons makes one per registered name; it refuses to
    delete one that still holds a model, which is then kept)."""
    for group_id in state.model_group_ids:
        try:
            _call(client, "DELETE", f"{_ML}/model_groups/{group_id}")
        except OpenSearchMissing:
            continue
        except OpenSearchRefused as exc:
            logger.warning("model group %s of %s kept: %s", group_id, state.name, exc)
            continue
        state.actions.append(f"model group {group_id} deleted")
    state.model_group_ids = []


def _model_group(client: Any, state: PipelineState, description: str) -> str:
    """The model group the pipeline's model is registered in (made once, named as the pipeline)."""
    if state.model_group_ids:
        return state.model_group_ids[0]
    made = _call(client, "POST", f"{_ML}/model_groups/_register", {"name": state.name, "description": description})
    state.model_group_ids = [made["model_group_id"]]
    state.actions.append(f"model group {made['model_group_id']} created")
    return made["model_group_id"]


@contextmanager
def pipeline_lock(client: Any, name: str, wait: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the lock of pipeline ``name`` (module doc) while the block runs; wait for another holder first.

    A document ``name`` of ``semdup-locks``, made with ``op_type=create``: one process makes it, the others wait
    (polling) until it is deleted. One older than :data:`LOCK_STALE_S` (a killed ``create``) is taken over, by a
    write conditioned on its sequence number, so two waiters cannot both take it.

    Raises:
        OpenSearchUnavailable: another ``create`` or ``remove`` of ``name`` held it longer than ``wait``.
    """
    try:
        ensure(client, LOCKS)
    except OpenSearchRefused as exc:
        if exc.status != 403:
            raise
        logger.warning("this user may not create %s, so %s runs unlocked (two at once may race): %s", LOCKS.name,
                       name, exc)  # fmt: skip
        yield
        return
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + wait
    while True:
        now = int(time.time())
        doc = {"what": "semdup pipeline", "owner": owner, "taken": now}
        try:
            made = client.index(index=LOCKS.name, id=name, body=doc, op_type="create", refresh="true")
            break
        except OpenSearchRefused as exc:
            if exc.status != 409:
                raise
        held = client.get(index=LOCKS.name, id=name, ignore=(404,))
        if held.get("found") and now - int(held["_source"].get("taken", now)) > LOCK_STALE_S:
            try:
                made = client.index(index=LOCKS.name, id=name, body=doc, refresh="true",
                                    if_seq_no=held["_seq_no"], if_primary_term=held["_primary_term"])  # fmt: skip
                logger.warning("took over the lock of pipeline %s left by %s", name, held["_source"].get("owner"))
                break
            except OpenSearchRefused as exc:
                if exc.status != 409:
                    raise
        if time.monotonic() > deadline:
            raise OpenSearchUnavailable(f"another `semdup pipeline create` or `remove` of {name} has held its lock "
                                        f"for over {wait:.0f} s (semdup-locks/{name})")  # fmt: skip
        time.sleep(0.25)
    try:
        yield
    finally:
        try:
            client.delete(index=LOCKS.name, id=name, refresh="true", if_seq_no=made["_seq_no"],
                          if_primary_term=made["_primary_term"])  # fmt: skip
        except OpenSearchRefused as exc:  # taken over meanwhile (held past LOCK_STALE_S) or gone: not ours
            logger.warning("the lock of pipeline %s was no longer ours: %s", name, exc)


def _semdup_connectors(client: Any, but: str | None) -> list[dict[str, Any]]:
    """Every connector ``semdup pipeline create`` made (it records its spec), except the one with id ``but``."""
    body = {"size": 1000, "query": {"match_all": {}}}
    try:
        got = _call(client, "POST", f"{_ML}/connectors/_search", body)
    except (OpenSearchMissing, OpenSearchRefused) as exc:
        if isinstance(exc, OpenSearchMissing) or exc.status in (400, 404):
            return []
        raise
    hits = (got.get("hits") or {}).get("hits") or []
    return [{"_id": h["_id"], **(h.get("_source") or {})} for h in hits
            if h["_id"] != but and _SPEC in ((h.get("_source") or {}).get("parameters") or {})]  # fmt: skip


def _url_of(connector: dict[str, Any]) -> str:
    actions = connector.get("actions") or [{}]
    return str(actions[0].get("url") or "")


def _shared_records(client: Any, service_url: str, but: str | None) -> dict[str, str]:
    """The changes other semdup connectors recorded that a connector to ``service_url`` needs too: recorded on it
    as well, so whichever is removed last takes them back."""
    url = service_url.rstrip("/") + REWRITE_PATH
    out: dict[str, str] = {}
    for other in _semdup_connectors(client, but):
        params = other.get("parameters") or {}
        added = params.get(_ADDED_REGEX)
        if added and _ADDED_REGEX not in out and matches(added, url):
            out[_ADDED_REGEX], out[_WAS_DEFAULT] = added, params.get(_WAS_DEFAULT, "true")
        if params.get(_SET_PRIVATE) == "true" and is_private(service_url):
            out[_SET_PRIVATE] = "true"
    return out


def _security_absent(client: Any) -> bool:
    """True when no node of the cluster runs the security plugin (module doc)."""
    try:
        plugins = client.cat.plugins(params={"format": "json"})
    except (OpenSearchRefused, OpenSearchUnavailable) as exc:  # not allowed to look: say nothing
        logger.info("could not list the cluster's plugins: %s", exc)
        return False
    return not any("security" in str(p.get("component", "")) for p in plugins or [])


def _warm_up(client: Any, spec: PipelineSpec, state: PipelineState) -> None:
    """One search through the new pipeline (no hits asked): the connector's first call (its HTTP client) and the
    service's first rank of the index are paid here, not by the site's first search (module doc)."""
    title = text_fields(client, spec.index)[0]
    t0 = time.perf_counter()
    try:
        client.search(index=spec.index, body={"size": 0, "query": {"match": {title: "semdup pipeline warm up"}}},
                      params={"search_pipeline": spec.object_name, "request_timeout": 60})  # fmt: skip
    except (OpenSearchRefused, OpenSearchUnavailable) as exc:  # the search runs with --on-failure error: said
        state.warnings.append(f"the warm-up search through {spec.object_name} failed: {str(exc)[:300]}")
        return
    state.actions.append(f"warm-up search through {spec.object_name}: {1000 * (time.perf_counter() - t0):.0f} ms")


def create(client: Any, spec: PipelineSpec, key: str, *, replace_key: bool = False, warm: bool = True
           ) -> PipelineState:  # fmt: skip
    """Set up (or bring up to date) semdup's search pipeline for ``spec.index`` (module doc); idempotent, and one
    at a time per pipeline name (a second waits for the first, then finds its state).

    ``key``: a key of the service with the ``search`` scope (the connector's credential). An existing connector
    made from the same spec keeps its key unless ``replace_key``. ``warm``: end with the warm-up search.

    Raises:
        SettingsRefused: the cluster settings need an administrator (the message has the body to run).
        OpenSearchMissing: ``spec.index`` does not exist. OpenSearchUnavailable: ml-commons failed a step.
    """
    client.indices.get_mapping(index=spec.index)  # the index exists (OpenSearchMissing otherwise)
    with pipeline_lock(client, spec.object_name):
        state = _create(client, spec, key, replace_key)
    if warm and state.actions:
        _warm_up(client, spec, state)
    if _security_absent(client):
        state.warnings.append(NO_SECURITY_WARNING)
    return state


def _create(client: Any, spec: PipelineSpec, key: str, replace_key: bool) -> PipelineState:
    version = _version(client)
    state = describe(client, spec.index, spec.object_name)
    change = needed_settings(client, spec.service_url)
    apply_settings(client, change)
    if not change.empty:
        state.actions.append(f"cluster settings: {json.dumps(change.body()['persistent'])}")
    # what an earlier create changed stays recorded on a replaced connector, and what another pipeline's changed
    # that this one needs is recorded here too (module doc)
    recorded = {**_shared_records(client, spec.service_url, state.connector_id), **state.settings}
    if change.added:
        recorded[_ADDED_REGEX] = change.added
        recorded[_WAS_DEFAULT] = str(change.trusted_was_default).lower()
    if change.private_ip:
        recorded[_SET_PRIVATE] = "true"
    kept = SettingsChange(None, recorded.get(_SET_PRIVATE) == "true", recorded.get(_ADDED_REGEX),
                          recorded.get(_WAS_DEFAULT, "true") == "true")  # fmt: skip
    same = state.connector_id is not None and state.settings.get(_SPEC) == spec.fingerprint() and not replace_key
    if not same:
        if state.model_id is not None:
            _undeploy_and_delete(client, state.model_id)
            state.actions.append(f"model {state.model_id} removed (its connector changes)")
            state.model_id = None
        if state.connector_id is not None:
            _delete_connector(client, state)
            state.actions.append(f"connector {state.connector_id} replaced")
        made = _passing_retried(lambda: _call(client, "POST", f"{_ML}/connectors/_create",
                                              connector_body(spec, key, version, kept)), "connector create")
        state.connector_id = made["connector_id"]
        state.actions.append(f"connector {state.connector_id} created")
    for attempt in range(DEPLOY_TRIES):
        if state.model_id is None:
            body = {"name": spec.object_name, "function_name": "remote", "connector_id": state.connector_id,
                    "model_group_id": _model_group(client, state, f"semdup's ranking of {spec.index}"),
                    "description": f"semdup's ranking of {spec.index}"}  # fmt: skip
            made = _call(client, "POST", f"{_ML}/models/_register", body)
            state.model_id = made.get("model_id") or _wait_task(client, made["task_id"], "register the model")[
                "model_id"]  # fmt: skip
            state.actions.append(f"model {state.model_id} registered")
            state.model_state = None
        if state.model_state == "DEPLOYED":
            break
        try:
            _deploy(client, state.model_id)
        except (OpenSearchRefused, OpenSearchUnavailable) as exc:
            if _DUPLICATE_DEPLOY not in exc.reason or attempt == DEPLOY_TRIES - 1:
                raise
            # a node keeps the task of a deploy that failed (on the master key) and refuses every later one as
            # its duplicate: a model registered again has no task anywhere
            _undeploy_and_delete(client, state.model_id)
            state.actions.append(f"model {state.model_id} removed (its nodes kept a failed deploy's task)")
            state.model_id = None
            continue
        state.model_state = "DEPLOYED"
        state.actions.append(f"model {state.model_id} deployed")
        break
    wanted = pipeline_body(spec, state.model_id)
    if state.pipeline != wanted:
        _call(client, "PUT", f"/_search/pipeline/{spec.object_name}", wanted)
        state.actions.append(f"search pipeline {spec.object_name} {'updated' if state.pipeline else 'created'}")
        state.pipeline = wanted
    if spec.default:
        behind = client.indices.get_mapping(index=spec.index)  # the concrete indices behind the name
        if set(behind) != set(state.default_of):
            client.indices.put_settings(index=spec.index, body={"index.search.default_pipeline": spec.object_name})
            state.default_of = sorted(behind)
            state.actions.append(f"default search pipeline of {spec.index}")
    state.settings = {k: v for k, v in {**recorded, _SPEC: spec.fingerprint()}.items() if k in _RECORDED}
    return state


def remove(client: Any, index: str, name: str | None = None) -> PipelineState:
    """Undo what ``create`` set up for ``index`` (module doc); idempotent: a second call finds nothing to do."""
    with pipeline_lock(client, name or names(index)):
        return _remove(client, index, name)


def _remove(client: Any, index: str, name: str | None) -> PipelineState:
    state = describe(client, index, name)
    if state.default_of:
        client.indices.put_settings(index=",".join(state.default_of),
                                    body={"index.search.default_pipeline": None})  # fmt: skip
        state.actions.append(f"default search pipeline of {', '.join(state.default_of)} unset")
    if state.pipeline is not None:
        _call(client, "DELETE", f"/_search/pipeline/{state.name}")
        state.actions.append(f"search pipeline {state.name} deleted")
    if state.model_id is not None:
        _undeploy_and_delete(client, state.model_id)
        state.actions.append(f"model {state.model_id} undeployed and deleted")
    _delete_groups(client, state)
    if state.connector_id is not None:
        if _delete_connector(client, state):
            state.actions.append(f"connector {state.connector_id} deleted")
        _restore_settings(client, state, state.connector_id)
    return state


CONNECTOR_DELETE_WAIT_S = 30.0  # how long a connector's delete waits for its just-deleted model to be gone
ML_RETRY_S = 180.0  # how long a step is sent again while ml-commons answers a passing failure

# ml-commons' first connector and deploy on a cluster: each node reads the connectors' master key with a short wait
# of its own, which a loaded node misses; and a deploy sent while a node still runs the one before is a duplicate
_PASSING_ML_ERRORS = ("Fetching master key timed out",)
_DUPLICATE_DEPLOY = "Duplicate deploy model task"
DEPLOY_TRIES = 3  # models registered, at most, when the nodes keep refusing a deploy as a duplicate


def _passing_retried(step: Callable[[], Any], what: str, done: Callable[[], bool] | None = None) -> Any:
    """``step()``, sent again while ml-commons answers one of ``_PASSING_ML_ERRORS`` (an operator would run
    ``create`` again; this does it for them), for ``ML_RETRY_S`` at most; ``done()`` says the step took effect
    anyway (a duplicate deploy that ended well). The connector's create fails before it writes anything when the
    master key is not read (the credential is encrypted first), so sending it again leaves no second one."""
    deadline = time.monotonic() + ML_RETRY_S
    while True:
        try:
            return step()
        except (OpenSearchRefused, OpenSearchUnavailable) as exc:
            if not any(e in exc.reason for e in _PASSING_ML_ERRORS) or time.monotonic() > deadline:
                raise
            logger.info("%s again: %s", what, exc)
        time.sleep(2.0)
        if done is not None and done():
            return None


def _deploy(client: Any, model_id: str) -> None:
    """Deploy the model on every eligible node (:func:`_passing_retried`), until it is DEPLOYED."""

    def deploy() -> None:
        task = _call(client, "POST", f"{_ML}/models/{model_id}/_deploy")
        if task.get("task_id"):
            _wait_task(client, task["task_id"], "deploy the model")

    def deployed() -> bool:
        return _call(client, "GET", f"{_ML}/models/{model_id}").get("model_state") == "DEPLOYED"

    _passing_retried(deploy, f"deploy of model {model_id}", deployed)


def _models_of(client: Any, connector_id: str) -> list[str]:
    """The models whose connector is exactly ``connector_id``."""
    body = {"size": 100, "query": {"match": {"connector_id": connector_id}}}  # text or keyword, by version
    hits = (_call(client, "POST", f"{_ML}/models/_search", body).get("hits") or {}).get("hits") or []
    return [h["_id"] for h in hits if (h.get("_source") or {}).get("connector_id") == connector_id]


def _delete_connector(client: Any, state: PipelineState) -> bool:
    """Delete ``state``'s connector; False (and a warning) when ml-commons refuses for a model of another one.

    ml-commons answers 409 "models are still using this connector" while a model on it is still found, which a
    loaded node does for a moment after the model's delete: that waits ``CONNECTOR_DELETE_WAIT_S`` at most. It
    looks the models up with a match query on ``connector_id``, a text field, so a model of *another* connector
    whose id shares a word with this one's (ids split at ``-``) blocks the delete as long as it exists: the
    connector is then left, holding no model, and the next ``remove`` tries it again."""
    connector_id = state.connector_id
    deadline = time.monotonic() + CONNECTOR_DELETE_WAIT_S
    while True:
        try:
            _call(client, "DELETE", f"{_ML}/connectors/{connector_id}")
            return True
        except OpenSearchRefused as exc:
            if exc.status != 409 or "still using this connector" not in exc.reason:
                raise
            if time.monotonic() <= deadline:
                time.sleep(0.5)
                continue
            if not _models_of(client, connector_id):
                state.warnings.append(
                    f"connector {connector_id} left: ml-commons counts a model of another connector as using it "
                    f"(it matches connector ids word by word: {exc.reason[-120:]}); it holds no model, and "
                    "`semdup pipeline remove` deletes it once that model is gone")  # fmt: skip
                return False
            raise


def _restore_settings(client: Any, state: PipelineState, deleted: str) -> None:
    """Take back the cluster settings ``create`` changed (recorded on the connector) that no other semdup
    connector still needs: a regex another one's URL matches, private addresses while another one's service has
    one, are left (and recorded on that connector, :func:`_shared_records`)."""
    others = [_url_of(c) for c in _semdup_connectors(client, deleted)]  # a search may still show the deleted one
    added = state.settings.get(_ADDED_REGEX)
    private = state.settings.get(_SET_PRIVATE) == "true"
    needed = []
    if added and any(matches(added, url) for url in others):
        needed.append("the trusted endpoint regex")
        added = None
    if private and any(is_private(url) for url in others):
        needed.append("private addresses")
        private = False
    if needed:
        state.actions.append(f"cluster settings kept for another semdup pipeline: {', '.join(needed)}")
    persistent = restore_body(client, added, state.settings.get(_WAS_DEFAULT) != "false", private)
    if persistent:
        client.cluster.put_settings(body={"persistent": persistent})
        state.actions.append(f"cluster settings restored: {', '.join(sorted(persistent))}")
