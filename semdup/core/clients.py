"""Clients built from :mod:`semdup.core.settings`: the OpenSearch client (checked with ``GET /``, AWS SigV4
where asked), the broker probe, and the translation of connection errors into semdup's error tree.

Kept apart from the settings so that reading configuration never opens a connection.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from semdup.core.errors import BrokerUnavailable, ConfigError, OpenSearchUnavailable
from semdup.core.settings import START_HINT, BrokerSettings, OpenSearchSettings

__all__ = [
    "connect",
    "aws_auth",
    "check_broker",
    "opensearch_errors",
    "error_reason",
    "orjson_serializer",
    "knn_available",
]

logger = logging.getLogger(__name__)


def error_reason(error: Any) -> str:
    """What an OpenSearch error body says went wrong: its first root cause's reason, else its own reason, else the
    error as text (a bare type such as "action_request_validation_exception" says neither which request nor why)."""
    if isinstance(error, dict):
        causes = error.get("root_cause")
        if isinstance(causes, list) and causes and isinstance(causes[0], dict) and causes[0].get("reason"):
            return str(causes[0]["reason"])
        if error.get("reason"):
            return str(error["reason"])
    return str(error)


@contextmanager
def opensearch_errors(action: str) -> Iterator[None]:
    """Turn opensearch-py's connection errors during ``action`` into one OpenSearchUnavailable that says
    how to start a cluster (the CLI prints it as one line)."""
    from opensearchpy.exceptions import ConnectionError as ClientConnectionError

    try:
        yield
    except ClientConnectionError as exc:  # includes ConnectionTimeout
        raise OpenSearchUnavailable(
            f"OpenSearch did not answer while {action} ({type(exc).__name__}); {START_HINT}"
        ) from exc


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
    """An ``opensearchpy.OpenSearch`` client for ``settings``, checked with ``GET /`` unless ``check=False``.

    ``pool_maxsize``: connections kept open per node, at least one per thread that calls at the same time (the
    service passes its request threads; default :data:`_POOL_MAXSIZE`).

    Raises:
        OpenSearchUnavailable: the cluster does not answer (message has the URL, without credentials).
        ConfigError: credentials refused, or TLS verification failed.
    """
    from opensearchpy import OpenSearch, RequestsHttpConnection

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
    client = OpenSearch(**kwargs)
    if check and settings.aws_service != "aoss":  # Serverless has no GET /
        _probe(client, settings)
    return client


# Connections kept open per node: the service and the benchmarks call from several threads, and urllib3's default
# of one makes every concurrent call beyond the first open (and drop) a connection of its own. The service sizes
# its pool to its request threads instead.
_POOL_MAXSIZE = 16


@functools.cache
def orjson_serializer() -> Any:
    """The client's JSON (de)serializer on orjson: a rerank reads ~100 hits with their docvalue fields, and
    opensearch-py's stdlib ``json`` parsing was a visible part of it. Whatever orjson refuses (an integer
    beyond 64 bits, a type it cannot write) goes through the stdlib serializer, as before.
    """
    import orjson
    from opensearchpy.exceptions import SerializationError
    from opensearchpy.serializer import JSONSerializer

    class OrjsonSerializer(JSONSerializer):
        def loads(self, s: str) -> Any:
            try:
                return orjson.loads(s)
            except orjson.JSONDecodeError:
                return super().loads(s)  # raises SerializationError on text that is not JSON at all

        def dumps(self, data: Any) -> Any:
            if isinstance(data, str):
                return data
            try:
                return orjson.dumps(data, default=self.default, option=orjson.OPT_SERIALIZE_NUMPY).decode("utf-8")
            except (orjson.JSONEncodeError, SerializationError):
                return super().dumps(data)

    return OrjsonSerializer()


def _probe(client: Any, settings: OpenSearchSettings) -> None:
    from opensearchpy.exceptions import (
        AuthenticationException,
        AuthorizationException,
        ConnectionError,
        SSLError,
        TransportError,
    )

    url = settings.safe_url
    try:
        info = client.info(request_timeout=settings.timeout)
    except (AuthenticationException, AuthorizationException) as exc:
        client.close()
        raise ConfigError(
            f"OpenSearch at {url} refused the credentials (HTTP {exc.status_code}); check "
            "SEMDUP_OPENSEARCH_USERNAME/PASSWORD or the AWS role's access policy"
        ) from exc
    except SSLError as exc:
        client.close()
        raise ConfigError(
            f"TLS with {url} failed ({str(exc.info)[:200]}); set SEMDUP_OPENSEARCH_CA_CERTS to the cluster's CA, "
            "or SEMDUP_OPENSEARCH_VERIFY_CERTS=false for a throw-away test cluster"
        ) from exc
    except ConnectionError as exc:  # includes ConnectionTimeout
        client.close()
        raise OpenSearchUnavailable(f"no OpenSearch at {url} ({type(exc.info).__name__}); {START_HINT}") from exc
    except TransportError as exc:
        client.close()
        raise OpenSearchUnavailable(
            f"OpenSearch at {url} answered HTTP {exc.status_code} to GET /: {exc.error}"
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
    from opensearchpy.exceptions import OpenSearchException

    try:
        rows = client.cat.plugins(format="json", request_timeout=10)
    except OpenSearchException as exc:
        raise OpenSearchUnavailable(f"could not list the cluster's plugins: {exc}") from exc
    return any(row.get("component") == "opensearch-knn" for row in rows)
