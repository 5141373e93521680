"""Clients built from :mod:`semdup.core.settings`: the OpenSearch client (checked with ``GET /``, AWS SigV4
where asked; its transport raises semdup's errors, :mod:`semdup.opensearch_io.boundary`) and the broker probe.

Kept apart from the settings so that reading configuration never opens a connection.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from semdup.core.errors import BrokerUnavailable, ConfigError, OpenSearchError, OpenSearchUnavailable
from semdup.core.settings import START_HINT, BrokerSettings, OpenSearchSettings

__all__ = ["connect", "aws_auth", "check_broker", "knn_available"]

logger = logging.getLogger(__name__)


def aws_auth(settings: OpenSearchSettings, credentials: Any = None) -> Any:
    """A SigV4 signer (``opensearchpy.AWSV4SignerAuth``) for ``settings.aws_region`` / ``aws_service``.

    ``credentials`` defaults to boto3's chain (environment, ~/.aws, instance or pod role).
    """
    if not settings.aws_region:
        raise ConfigError("AWS SigV4 needs a region; set SEMDUP_AWS_REGION")
    if credentials is None:
        try:
            import boto3
        except ImportError as exc:
            raise ImportError('AWS SigV4 signing needs boto3: pip install "semdup[aws]"') from exc
        credentials = boto3.Session().get_credentials()
        if credentials is None:
            raise ConfigError(
                "AWS SigV4 is on (SEMDUP_AWS_REGION) but boto3 found no credentials; set AWS_ACCESS_KEY_ID/"
                "AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or run with an instance/pod role"
            )
    from opensearchpy import AWSV4SignerAuth

    return AWSV4SignerAuth(credentials, settings.aws_region, settings.aws_service)


def connect(settings: OpenSearchSettings, check: bool = True, pool_maxsize: int | None = None) -> Any:
    """An OpenSearch client for ``settings``, checked with ``GET /`` unless ``check=False``. Its transport raises
    semdup's errors (:class:`~semdup.opensearch_io.boundary.MappedTransport`), never opensearch-py's.

    ``pool_maxsize``: connections kept open per node, at least one per thread that calls at the same time (the
    service passes its request threads; default :data:`_POOL_MAXSIZE`).

    Raises:
        OpenSearchUnavailable: the cluster does not answer (message has the URL, without credentials).
        ConfigError: credentials refused, or TLS verification failed.
    """
    from opensearchpy import OpenSearch, RequestsHttpConnection

    from semdup.opensearch_io.boundary import MappedTransport, orjson_serializer

    parts = urlsplit(settings.url)
    https = parts.scheme == "https"
    host: dict[str, Any] = {"host": parts.hostname, "port": parts.port or (443 if https else 9200)}
    if parts.path not in ("", "/"):
        host["url_prefix"] = parts.path
    kwargs: dict[str, Any] = {
        "hosts": [host],
        "use_ssl": https,
        "verify_certs": settings.verify_certs,
        "ca_certs": settings.ca_certs,
        "timeout": settings.timeout,
        "max_retries": settings.max_retries,
        "retry_on_timeout": False,
    }
    if https and not settings.verify_certs:
        logger.warning(
            "TLS certificate checks are off for %s; set SEMDUP_OPENSEARCH_CA_CERTS instead", settings.safe_url
        )
        kwargs["ssl_show_warn"] = False
    if settings.ca_certs and not Path(settings.ca_certs).is_file():
        raise ConfigError(f"CA file {settings.ca_certs} does not exist; fix SEMDUP_OPENSEARCH_CA_CERTS")
    if settings.username:
        kwargs["http_auth"] = (settings.username, settings.password or "")
    elif settings.aws_region:
        kwargs["http_auth"] = aws_auth(settings)
        kwargs["connection_class"] = RequestsHttpConnection  # AWSV4SignerAuth signs requests' requests
    kwargs["serializer"] = orjson_serializer()
    kwargs["pool_maxsize"] = max(pool_maxsize or _POOL_MAXSIZE, 1)
    client = OpenSearch(transport_class=MappedTransport, **kwargs)
    if check and settings.aws_service != "aoss":  # Serverless has no GET /
        _probe(client, settings)
    return client


# Connections kept open per node: the service and the benchmarks call from several threads, and urllib3's default
# of one makes every concurrent call beyond the first open (and drop) a connection of its own. The service sizes
# its pool to its request threads instead.
_POOL_MAXSIZE = 16


def _probe(client: Any, settings: OpenSearchSettings) -> None:
    url = settings.safe_url
    try:
        info = client.info(request_timeout=settings.timeout)
    except OpenSearchError as exc:
        client.close()
        user = f"user {settings.username!r}" if settings.username else "the credentials"
        if exc.status == 401:
            raise ConfigError(
                f"OpenSearch at {url} refused {user} (HTTP 401: wrong name or password); check "
                "SEMDUP_OPENSEARCH_USERNAME and SEMDUP_OPENSEARCH_PASSWORD" + ("" if settings.username else
                " or the AWS role's access policy")
            ) from exc
        if exc.status == 403:  # logged in, but may not even say hello: no role, or one without cluster:monitor/main
            raise ConfigError(
                f"OpenSearch at {url} let {user} in but refused GET / (HTTP 403: {exc.reason[:200]}); give it its "
                "semdup role (`semdup roles print`) or fix the AWS role's access policy"
            ) from exc
        if exc.type == "SSLError":
            raise ConfigError(
                f"TLS with {url} failed ({exc.reason}); set SEMDUP_OPENSEARCH_CA_CERTS to the cluster's CA, "
                "or SEMDUP_OPENSEARCH_VERIFY_CERTS=false for a throw-away test cluster"
            ) from exc
        if isinstance(exc, OpenSearchUnavailable) and exc.status is None:  # nothing answered
            raise OpenSearchUnavailable(f"no OpenSearch at {url} ({exc.reason}); {START_HINT}", type=exc.type) from exc
        if exc.status is None:  # an answer the client could not read (not JSON): its own error says so
            raise
        raise OpenSearchUnavailable(
            f"OpenSearch at {url} answered HTTP {exc.status} to GET /: {exc.reason}", status=exc.status, type=exc.type
        ) from exc
    version = (info.get("version") or {}).get("number", "?")
    logger.info("connected to OpenSearch %s at %s", version, url)


def check_broker(url: str, timeout: float = 5.0) -> None:
    """Raise BrokerUnavailable unless the broker at ``url`` answers within ``timeout`` seconds."""
    settings = BrokerSettings(url)
    scheme = urlsplit(url).scheme
    if scheme.startswith("redis"):
        import redis

        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        try:
            client.ping()
        except redis.AuthenticationError as exc:
            raise BrokerUnavailable(
                f"Redis at {settings.safe_url} refused the password; fix SEMDUP_BROKER_URL"
            ) from exc
        except redis.RedisError as exc:
            raise BrokerUnavailable(
                f"no broker at {settings.safe_url} ({type(exc).__name__}); start it with `semdup broker start` "
                "or set SEMDUP_BROKER_URL"
            ) from exc
        finally:
            client.close()
        return
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=timeout) as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
    except Exception as exc:  # kombu raises OperationalError or the transport's own errors
        raise BrokerUnavailable(
            f"no broker at {settings.safe_url} ({type(exc).__name__}); set SEMDUP_BROKER_URL"
        ) from exc


def knn_available(client: Any) -> bool:
    """True when the cluster lists the ``opensearch-knn`` plugin in ``_cat/plugins``."""
    rows = client.cat.plugins(format="json", request_timeout=10)
    return any(row.get("component") == "opensearch-knn" for row in rows)
