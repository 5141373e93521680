"""Every environment variable semdup reads, where its value goes in the settings tree, and what it means.

One row per variable (:class:`Var`): the table ``semdup config table`` writes (``docs/settings.md``) and the map the
settings tree reads the environment with (:mod:`semdup.apps.settings`). :data:`OTHER_VARIABLES` are read outside
the tree (the dev stack, where the data sets and downloads are); :data:`LEGACY_KEYS` maps the flat ``reranker:``
section of config files written before the tree.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Var", "VARIABLES", "OTHER_VARIABLES", "LEGACY_KEYS", "BY_PATH", "HANDOFF_ENV", "CONFIG_ENV"]

HANDOFF_ENV = "SEMDUP_SETTINGS"  # the resolved tree, JSON, from `semdup serve` to its uvicorn workers
CONFIG_ENV = "SEMDUP_CONFIG"


@dataclass(frozen=True)
class Var:
    """One environment variable: where its value goes in the tree (``section.field``), how its text is read
    (``text``, ``bool``, ``auto_bool``: true/false/auto, ``csv``, ``api_keys``), whether it is a secret (masked in
    ``config show``), what it means, and what a bad value is told it must be where the type alone says too little."""

    name: str
    path: str
    help: str
    kind: str = "text"
    secret: bool = False
    expect: str = ""


# fmt: off
VARIABLES: tuple[Var, ...] = (
    Var(CONFIG_ENV, "config_file", "a YAML or TOML file holding the sections below (below the environment)"),
    Var("SEMDUP_OPENSEARCH_URL", "opensearch.url", "the cluster: http(s)://host:port"),
    Var("OPENSEARCH_URL", "opensearch.url", "the same, when SEMDUP_OPENSEARCH_URL is unset"),
    Var("SEMDUP_OPENSEARCH_USERNAME", "opensearch.username", "HTTP basic auth user"),
    Var("SEMDUP_OPENSEARCH_PASSWORD", "opensearch.password", "HTTP basic auth password", secret=True),
    Var("SEMDUP_OPENSEARCH_VERIFY_CERTS", "opensearch.verify_certs", "check the cluster's TLS certificate", "bool"),
    Var("SEMDUP_OPENSEARCH_CA_CERTS", "opensearch.ca_certs", "PEM file of the cluster's CA"),
    Var("SEMDUP_OPENSEARCH_TIMEOUT", "opensearch.timeout", "seconds per request: the client's one timeout"),
    Var("SEMDUP_OPENSEARCH_MAX_RETRIES", "opensearch.max_retries", "retries on 502/503/504"),
    Var("SEMDUP_AWS_REGION", "opensearch.aws_region", "SigV4 signing for Amazon OpenSearch (needs semdup[aws])"),
    Var("SEMDUP_AWS_SERVICE", "opensearch.aws_service", "es (managed OpenSearch) or aoss (Serverless)"),
    Var("SEMDUP_BROKER_URL", "broker.url", "the Celery broker: redis://, rediss:// or amqp://", secret=True),
    Var("SEMDUP_BUNDLE", "model.bundle", "the model bundle (directory or .tar.gz) of the workers and the service"),
    Var("SEMDUP_CALIBRATION", "model.calibration", "calibration file (threshold, Platt); default: beside the bundle"),
    Var("SEMDUP_TEMPLATES", "candidates.templates", "lexical candidate templates, comma-separated", "csv"),
    Var("SEMDUP_TEMPLATE_VARIANT", "candidates.variant", "the templates match text (title + body) or title"),
    Var("SEMDUP_SPARSE", "candidates.sparse", "add learned-sparse candidates", "bool"),
    Var("SEMDUP_KNN", "candidates.knn", "k-NN candidates: true, false or auto (where mapped)", "auto_bool"),
    Var("SEMDUP_K_CANDIDATES", "candidates.k_candidates", "candidates per retrieval path (1..1000)"),
    Var("SEMDUP_SEARCH_TIMEOUT", "candidates.search_timeout", "seconds per OpenSearch call of the reranker"),
    Var("SEMDUP_LEXICAL_TERMS", "candidates.lexical_terms",
        "N > 0: the lexical templates match the query's N heaviest terms (0: its whole text)"),
    Var("SEMDUP_DFS", "candidates.dfs", "the candidate searches gather the whole index's term statistics first "
        "(dfs_query_then_fetch): true, false or auto (where the index has more than one primary shard)", "auto_bool"),
    Var("SEMDUP_INDEX", "service.index", "the index a request without \"index\" searches (the service needs it)"),
    Var("SEMDUP_INDICES", "service.indices", "comma-separated indices or aliases requests may name", "csv"),
    Var("SEMDUP_API_KEY", "service.api_key", "one key clients send in X-API-Key (search scope)", secret=True),
    Var("SEMDUP_API_KEYS", "service.api_keys", "KEY:INDEX|INDEX[:SCOPES[:NAME]],... keys with indices and scopes",
        "api_keys", secret=True),
    Var("SEMDUP_AUTH", "service.auth", "off turns access control off (explicitly)", "bool"),
    Var("SEMDUP_MAX_BODY_BYTES", "service.max_body_bytes", "request bodies above this get 413"),
    Var("SEMDUP_MAX_TEXT_CHARS", "service.max_text_chars", "a title or body above this gets 422"),
    Var("SEMDUP_MAX_K", "service.max_k", "most candidates a request may ask for"),
    Var("SEMDUP_THREADS", "service.threads", "request threads per service worker process"),
    Var("SEMDUP_ONNX_THREADS", "service.onnx_threads",
        "onnxruntime threads of each query's encoding, at most the usable CPUs (0 = all cores)"),
    Var("SEMDUP_MAX_IN_FLIGHT", "service.max_in_flight", "requests in flight per worker; more get 503 (0 = off)"),
    Var("SEMDUP_WORKERS", "service.workers", "uvicorn worker processes of semdup serve (1..64)"),
    Var("SEMDUP_INGEST", "service.ingest", "the /v1/posts endpoints (HTTP ingest) on or off", "auto_bool"),
    Var("SEMDUP_MAX_INGEST_POSTS", "service.max_ingest_posts", "most posts or ids one ingest request may carry"),
    Var("SEMDUP_OPS_AUTH", "service.ops_auth", "/metrics and /openapi.json need a key with the ops scope (off: open)",
        "bool"),
    Var("SEMDUP_AUTH_FAILURES", "service.auth_failures", "different wrong keys or logins an address may send per "
        "window, and times one wrong key may be sent again; more get 429 (the address, or that key)"),
    Var("SEMDUP_AUTH_WINDOW", "service.auth_window", "seconds over which an address's failures are counted"),
    Var("SEMDUP_AUTH_BLOCK", "service.auth_block", "seconds of the first 429 block; doubles in a row, at most 1 h"),
    Var("SEMDUP_RUNTIME_DIR", "service.runtime_dir", "folder for the state the service's workers share (the failure "
        "counts); default: a new temporary one per semdup serve"),
    Var("SEMDUP_FORWARDED_ALLOW_IPS", "service.forwarded_allow_ips", "the reverse proxies (addresses or networks, "
        "comma-separated) whose X-Forwarded-For gives the client's address; unset: none, every request counts by its "
        "connection's address", "csv", expect="IP addresses or networks, e.g. 10.0.0.5,10.1.0.0/16"),
    Var("SEMDUP_SESSION_SECRET", "review.session_secret", "signs the review page's cookies (32+ characters)",
        secret=True),
    Var("SEMDUP_SESSION_MAX_AGE", "review.session_max_age", "seconds a review login lasts at most"),
    Var("SEMDUP_SESSION_IDLE", "review.session_idle", "seconds a review login lasts unused"),
    Var("SEMDUP_POST_URL", "review.post_url", "a post's page on the site, with {id} (and {index})"),
    Var("SEMDUP_REVIEW_STATS_TTL", "review.stats_ttl", "seconds the review figures read from the cluster are kept"),
    Var("SEMDUP_VISIBILITY_TIMEOUT", "worker.visibility_timeout", "seconds before Redis hands a dead worker's batch "
        "to another", expect="whole seconds"),
    Var("SEMDUP_RETRY_BUDGET", "worker.retry_budget", "seconds a batch retries an unreachable cluster before it is "
        "parked", expect="seconds >= 0"),
    Var("SEMDUP_SWEEP_AFTER", "worker.sweep_after", "seconds a batch may be neither done nor queued before a waiting "
        "producer, `semdup watch` or `semdup serve` sends it again", expect="seconds > 0"),
    Var("SEMDUP_DEVICE", "worker.device", "what the workers encode on: auto (CUDA where it can be used, else CPU), "
        "cpu or cuda (refuses to start without CUDA)", expect="auto, cpu or cuda"),
    Var("SEMDUP_FP16", "worker.fp16", "the encoder's fp16 variant: auto (on CUDA where it verifies against fp32), "
        "true (demanded) or false", "auto_bool"),
    Var("SEMDUP_ENCODE_THREADS", "worker.encode_threads", "CPU cores one worker process encodes on (unset: all)",
        expect="a whole number of cores, 1..256"),
    Var("SEMDUP_FLAG_DUPLICATES", "alerts.flag_duplicates", "1: the indexing tasks chain duplicate flagging", "bool"),
    Var("SEMDUP_FLAG_K", "alerts.flag_k",
        "at most this many flags per post (1..100); unset: the calibration's k, else 10"),
    Var("SEMDUP_METRICS_PORT", "metrics.port", "the worker serves /metrics on this port (unset: off)",
        expect="a TCP port number"),
    Var("SEMDUP_METRICS_ADDR", "metrics.addr", "the address the worker's /metrics listens on"),
    Var("PROMETHEUS_MULTIPROC_DIR", "metrics.multiproc_dir", "prometheus_client's folder for the workers' counts"),
    Var("SEMDUP_LOG_FORMAT", "logging.format", "text, or json: one JSON object per line, secrets scrubbed"),
    Var("SEMDUP_PIPELINE_SERVICE_URL", "pipeline.service_url", "semdup's service as the cluster's nodes reach it "
        "(`semdup pipeline create`: the connector's URL)"),
    Var("SEMDUP_PIPELINE_TIMEOUT", "pipeline.timeout", "seconds a search in the pipeline waits for semdup (connect, "
        "then read) before it gives up on it", expect="seconds within (0, 60]"),
    Var("SEMDUP_PIPELINE_ON_FAILURE", "pipeline.on_failure", "original: a search semdup cannot rank runs as the "
        "site sent it; error: it fails", expect="original or error"),
    Var("SEMDUP_COMPANION_SHARDS", "indices.companion_shards", "primary shards of a companion `semdup enable` or "
        "`upgrade` creates (unset: the site index's)", expect="a whole number, 1..1024"),
    Var("SEMDUP_COMPANION_REPLICAS", "indices.companion_replicas", "replicas of a companion: a count, or a range "
        "such as 0-1 (auto_expand_replicas); unset: the site index's; `enable` applies a value set here to an "
        "existing companion", expect="a count (0, 1 ...) or a range like 0-1"),
    Var("SEMDUP_INDEX_SHARDS", "indices.index_shards", "primary shards of an index semdup creates itself "
        "(`index-posts`)", expect="a whole number, 1..1024"),
    Var("SEMDUP_INDEX_REPLICAS", "indices.index_replicas", "its replicas: a count or a range (0-1: one wherever "
        "there are two data nodes)", expect="a count (0, 1 ...) or a range like 0-1"),
    Var("SEMDUP_STORE_SHARDS", "indices.store_shards", "primary shards of each store (semdup-jobs, -duplicates, "
        "-verdicts, -sessions, -parked)", expect="a whole number, 1..1024"),
    Var("SEMDUP_STORE_REPLICAS", "indices.store_replicas", "their replicas: a count or a range (0-1: one wherever "
        "there are two data nodes)", expect="a count (0, 1 ...) or a range like 0-1"),
)

# Read outside the tree, by code that runs where no deployed process starts (the dev stack, research and tests),
# or not at all: listed so that the table names every SEMDUP_* variable the code holds.
OTHER_VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("SEMDUP_DATA_DIR", "semdup/data/paths.py", "the shared data sets (default: shared/data beside the checkout)"),
    ("SEMDUP_CACHE", "semdup/core/model_files.py", "downloads, unpacked models and servers (~/.cache/semdup)"),
    ("SEMDUP_OPENSEARCH_HEAP", "semdup/devstack", "heap of the embedded OpenSearch (dev stack only)"),
    ("SEMDUP_OPENSEARCH_VERSION", "semdup/devstack", "version of the embedded OpenSearch (dev stack only)"),
    ("SEMDUP_OPENSEARCH_USER", "semdup/devstack", "account the embedded OpenSearch runs as when started by root"),
    ("SEMDUP_JDK_DIRS", "semdup/devstack", "where to look for a Java runtime for the embedded OpenSearch"),
    ("SEMDUP_MAVEN_REPO", "semdup/devstack", "the Maven repository the embedded OpenSearch is assembled from"),
    (HANDOFF_ENV, "semdup/apps/settings.py", "set by semdup serve for its own workers: the resolved tree"),
    ("SEMDUP_LOG_JSON", "(retired)", "no longer read; set SEMDUP_LOG_FORMAT=json"),
)
# fmt: on

BY_PATH: dict[str, list[Var]] = {}
for _v in VARIABLES:
    BY_PATH.setdefault(_v.path, []).append(_v)

_SERVICE_KEYS = (
    "index", "indices", "api_key", "api_keys", "auth", "max_body_bytes", "max_text_chars", "max_k", "threads",
    "onnx_threads", "max_in_flight", "workers", "ingest", "max_ingest_posts", "ops_auth", "auth_failures",
    "auth_window", "auth_block", "runtime_dir",
)  # fmt: skip
_CANDIDATE_KEYS = ("templates", "variant", "sparse", "knn", "k_candidates", "search_timeout")

# The flat ``reranker:`` section of config files written before the tree: key -> place in the tree.
LEGACY_KEYS: dict[str, str] = {
    "bundle": "model.bundle",
    "calibration": "model.calibration",
    **{k: f"candidates.{k}" for k in _CANDIDATE_KEYS},
    **{k: f"service.{k}" for k in _SERVICE_KEYS},
    "session_secret": "review.session_secret",
    "session_max_age": "review.session_max_age",
    "session_idle": "review.session_idle",
    "post_url": "review.post_url",
    "review_stats_ttl": "review.stats_ttl",
}
