"""The least privilege each of semdup's users needs on a cluster with the security plugin, stated in code.

Three users of semdup's and the site's own search user (``semdup roles print`` writes their roles; an
administrator applies them, see
``docs/operations.md``, "Security plugin: users, roles and TLS")::

    role             who runs as it                             may
    semdup_service   semdup serve (rerank, similar, review)     search the site's index and its companion; read and
                                                                write the flags, verdicts and review sessions
    semdup_worker    semdup worker, backfill, watch,            write the companion, the job ledger and the parked
                     index-posts                                posts; read the site's index; write flags
    semdup_setup     enable, upgrade, pipeline create/remove    create the companion and its alias, store the search
                                                                templates and scripts, ml-commons' connector, model
                                                                and the search pipeline, the cluster settings
                                                                ``pipeline create`` changes
    semdup_site_search  the site's search user, once the    ``cluster:admin/opensearch/ml/predict`` (the pipeline's
                     pipeline is its index's default         call to semdup; without it the search falls back to
                                                             the site's own order, silently)

The lists start from what each part calls; running the flow as these users and reading the security plugin's 403s
added what the calls alone do not show (the shard-level ``indices:admin/refresh[s]`` and
``indices:data/read/mget[shard]``, ml-commons' own action names, the site user's ``predict``).
``tests/integration/test_secured_cluster.py`` runs the whole flow as these roles and checks each is refused outside
its patterns; it does not prove each read action in ``_READ`` necessary one by one. Action names are the
plugin's (``cluster:...``, ``indices:...``); no ``*`` on index patterns beyond the companion's own
(``<index>.semdup*``) and no built-in action group wider than the role needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from semdup.index_format.companion import companion_alias
from semdup.index_format.system_indices import FLAGS, JOBS, LOCKS, PARKED, SESSIONS, VERDICTS

__all__ = ["IndexPermission", "Role", "semdup_roles", "rest_bodies", "roles_yml"]

# Every client checks the cluster with GET / (semdup.opensearch_io.clients.connect).
_HELLO = ("cluster:monitor/main",)
# Reading: a search, a count, a document, a scroll, a mapping (each reader checks the index's fields first).
_READ = (
    "indices:data/read/search",
    "indices:data/read/search/template",
    "indices:data/read/msearch",
    "indices:data/read/msearch/template",
    "indices:data/read/get",
    "indices:data/read/mget*",  # and its shard-level action, indices:data/read/mget[shard]
    "indices:data/read/scroll",
    "indices:data/read/scroll/clear",
    "indices:data/read/count",
    "indices:admin/mappings/get",
    "indices:admin/get",
    "indices:admin/exists",
    "indices:admin/aliases/get",
    "indices:monitor/settings/get",
)
# Requests over several indices or documents: the plugin checks them at the cluster level, then each part on its
# index (``_READ``, ``_WRITE``).
_COMPOSITE_READ = (
    "indices:data/read/msearch",
    "indices:data/read/msearch/template",
    "indices:data/read/mget",
    "indices:data/read/scroll",
    "indices:data/read/scroll/clear",
)
# Writing documents (one at a time or in bulk), refreshing what was written, deleting by query (purges).
_WRITE = (
    "indices:data/write/index",
    "indices:data/write/update",
    "indices:data/write/delete",
    "indices:data/write/bulk*",
    "indices:data/write/delete/byquery",
    "indices:admin/refresh*",  # the shard-level action too: indices:admin/refresh[s]
)
# A store is created on first use and its mapping grows with semdup (semdup.index_format.system_indices.ensure).
_OWN_STORE = ("indices:admin/create", "indices:admin/mapping/put")


@dataclass(frozen=True)
class IndexPermission:
    """Actions allowed on the indices matching ``patterns``."""

    patterns: tuple[str, ...]
    actions: tuple[str, ...]

    def body(self) -> dict[str, Any]:
        return {"index_patterns": list(self.patterns), "allowed_actions": list(self.actions)}


@dataclass(frozen=True)
class Role:
    """One role: its name, who runs as it (``description``), its cluster and index permissions."""

    name: str
    description: str
    cluster: tuple[str, ...]
    indices: tuple[IndexPermission, ...]

    def body(self) -> dict[str, Any]:
        """The ``PUT _plugins/_security/api/roles/<name>`` body (also one entry of ``roles.yml``)."""
        return {
            "description": self.description,
            "cluster_permissions": list(self.cluster),
            "index_permissions": [p.body() for p in self.indices],
        }


def semdup_roles(indices: list[str], prefix: str = "semdup") -> list[Role]:
    """The service, worker and setup roles for the site indices (or aliases) ``indices``, named ``<prefix>_...``.

    A site that reads through an alias names the alias and its indices' pattern (e.g. ``travel`` and
    ``travel-*``): the plugin checks what a request resolves to.
    """
    if not indices:
        raise ValueError("name at least one site index")
    site = tuple(indices)
    companion = tuple(f"{companion_alias(i)}*" for i in indices)  # the alias and every model's index behind it
    service_stores = (FLAGS.name, VERDICTS.name, SESSIONS.name)
    service = Role(
        f"{prefix}_service",
        "semdup serve: rank candidates (/v1/rerank, /v1/similar) and run the review page",
        cluster=(*_HELLO, *_COMPOSITE_READ, "indices:data/write/bulk", "cluster:admin/script/get"),
        indices=(
            IndexPermission(site + companion, _READ),
            IndexPermission(service_stores, _READ + _WRITE + _OWN_STORE),
        ),
    )
    worker = Role(
        f"{prefix}_worker",
        "semdup worker, backfill, watch, index-posts: encode posts into the companion, keep the job ledger",
        cluster=(*_HELLO, *_COMPOSITE_READ, "indices:data/write/bulk", "cluster:admin/script/get"),
        indices=(
            IndexPermission(site, _READ),
            IndexPermission(companion, _READ + _WRITE),
            IndexPermission((JOBS.name, PARKED.name, FLAGS.name), _READ + _WRITE + _OWN_STORE),
        ),
    )
    setup = Role(
        f"{prefix}_setup",
        "semdup enable, upgrade, pipeline create/remove: the companion, the stored templates, the search pipeline",
        cluster=(
            *_HELLO,
            "cluster:monitor/health",  # enable: how many data nodes (the replica warning)
            "cluster:admin/script/put",
            "cluster:admin/script/get",
            "cluster:monitor/state",
            "cluster:admin/settings/update",
            "cluster:admin/search/pipeline/put",
            "cluster:admin/search/pipeline/get",
            "cluster:admin/search/pipeline/delete",
            "cluster:admin/opensearch/ml/create_connector",
            "cluster:admin/opensearch/ml/connectors/get",
            "cluster:admin/opensearch/ml/connectors/search",
            "cluster:admin/opensearch/ml/connectors/delete",
            "cluster:admin/opensearch/ml/register_model",
            "cluster:admin/opensearch/ml/register_model_group",
            "cluster:admin/opensearch/ml/model_groups/search",  # create finds its group, remove deletes it
            "cluster:admin/opensearch/ml/model_groups/get",
            "cluster:admin/opensearch/ml/delete_model_group",
            "cluster:admin/opensearch/ml/model_groups/delete",
            "cluster:admin/opensearch/ml/deploy_model",
            "cluster:admin/opensearch/ml/undeploy_model",
            "cluster:admin/opensearch/ml/undeploy_models",
            "cluster:admin/opensearch/ml/models/get",
            "cluster:admin/opensearch/ml/models/search",
            "cluster:admin/opensearch/ml/models/delete",
            "cluster:admin/opensearch/ml/tasks/get",
            "cluster:admin/opensearch/ml/predict",
            *_COMPOSITE_READ,
            "indices:data/write/bulk",
        ),
        indices=(
            IndexPermission(site, (*_READ, "indices:admin/settings/update")),  # the index's default pipeline
            IndexPermission(companion, (*_READ, *_WRITE, "indices:admin/create", "indices:admin/mapping/put",
                                        "indices:admin/aliases", "indices:admin/delete")),  # fmt: skip
            IndexPermission((JOBS.name, PARKED.name, LOCKS.name), _READ + _WRITE + _OWN_STORE),  # locks: pipeline
            # enable creates every store with the store settings (and reports one without a replica); it writes none
            IndexPermission((FLAGS.name, VERDICTS.name, SESSIONS.name), _READ + _OWN_STORE),
        ),
    )
    site_search = Role(
        f"{prefix}_site_search",
        "the site's own search user, once `semdup pipeline create --default` puts semdup in its _search",
        cluster=("cluster:admin/opensearch/ml/predict",),  # without it the pipeline falls back to the site's order
        indices=(IndexPermission(site, ("indices:data/read/search",)),),
    )
    return [service, worker, setup, site_search]


def rest_bodies(roles: list[Role]) -> dict[str, dict[str, Any]]:
    """role name -> its REST body: ``PUT _plugins/_security/api/roles/<name>`` with each."""
    return {r.name: r.body() for r in roles}


def roles_yml(roles: list[Role]) -> str:
    """The roles as ``roles.yml`` entries (``securityadmin.sh -f roles.yml -t roles`` applies them)."""
    import yaml

    doc: dict[str, Any] = {"_meta": {"type": "roles", "config_version": 2}}
    doc |= {r.name: {k: v for k, v in r.body().items()} for r in roles}
    return yaml.safe_dump(doc, sort_keys=False, width=119)
