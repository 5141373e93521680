"""Where semdup's OpenSearch cluster and Celery broker are, and how to log in to them.

Read once at the edge (CLI, worker start-up, app factory) and passed down as frozen settings::

    settings = OpenSearchSettings.from_env()     # env, else config file, else the embedded node
    client = connect(settings)                   # checked with GET / ; clear error when down

Sources, highest first: environment variables, one YAML or TOML config file (argument or
``$SEMDUP_CONFIG``) with ``opensearch:`` and ``broker:`` sections, then the embedded local
OpenSearch / Redis if running. Environment variables::

    SEMDUP_OPENSEARCH_URL (or OPENSEARCH_URL)   https://search.example.org:9200
    SEMDUP_OPENSEARCH_USERNAME / _PASSWORD      HTTP basic auth
    SEMDUP_OPENSEARCH_VERIFY_CERTS              true|false
    SEMDUP_OPENSEARCH_CA_CERTS                  PEM file of the cluster's CA
    SEMDUP_OPENSEARCH_TIMEOUT / _MAX_RETRIES    seconds per request / retries on 502-504
    SEMDUP_AWS_REGION, SEMDUP_AWS_SERVICE       SigV4 for Amazon OpenSearch (es) or Serverless (aoss)
    SEMDUP_BROKER_URL                           redis://host:6379/0, amqp://user:pass@host//

Passwords never appear in ``repr``, logs or error messages (:func:`redact_url`).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from semdup.errors import BrokerUnavailable, ConfigError, OpenSearchUnavailable

__all__ = [
    "OpenSearchSettings",
    "BrokerSettings",
    "connect",
    "aws_auth",
    "check_broker",
    "redact_url",
    "load_config_file",
    "opensearch_errors",
    "parse_bool",
    "orjson_serializer",
]

logger = logging.getLogger(__name__)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_START_HINT = "start the embedded one with `semdup opensearch start` or set SEMDUP_OPENSEARCH_URL"
_BROKER_SCHEMES = ("redis", "rediss", "amqp", "amqps", "pyamqp")


@contextmanager
def opensearch_errors(action: str) -> Iterator[None]:
    """Turn opensearch-py's connection errors during ``action`` into one OpenSearchUnavailable that says
    how to start a cluster (the CLI prints it as one line)."""
    from opensearchpy.exceptions import ConnectionError as ClientConnectionError

    try:
        yield
    except ClientConnectionError as exc:  # includes ConnectionTimeout
        raise OpenSearchUnavailable(
            f"OpenSearch did not answer while {action} ({type(exc).__name__}); {_START_HINT}"
        ) from exc


def redact_url(url: str) -> str:
    """``url`` with any user name and password replaced by ``***``: safe for logs and errors."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparseable URL>"
    if "@" not in parts.netloc:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"***@{host}" + (f":{port}" if port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def parse_bool(name: str, value: Any) -> bool:
    """A boolean setting from the environment or a config file (1/0, true/false, yes/no, on/off)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name} must be true or false (1/0, yes/no, on/off), got {value!r}")


def _parse_number(name: str, value: Any, kind: type) -> Any:
    try:
        return kind(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name} must be a {kind.__name__}, got {value!r}") from exc


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML (.yml/.yaml) or TOML (.toml) config file into a dict of sections."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist; fix SEMDUP_CONFIG or the --config argument") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read as UTF-8 text: {exc}") from exc
    suffix = path.suffix.lower()
    try:
        if suffix in (".yml", ".yaml"):
            import yaml

            data = yaml.safe_load(text)
        elif suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(text)
        else:
            raise ConfigError(f"config file {path} must end in .yaml, .yml or .toml, got {suffix or 'no suffix'!r}")
    except ConfigError:
        raise
    except Exception as exc:  # yaml.YAMLError / tomllib.TOMLDecodeError
        raise ConfigError(f"config file {path} is not valid {suffix[1:].upper()}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path} must hold a mapping of sections (opensearch:, broker:), got {type(data).__name__}"
        )
    return data


def _section(data: Mapping[str, Any], name: str, allowed: tuple[str, ...], source: str) -> dict[str, Any]:
    section = data.get(name) or {}
    if not isinstance(section, dict):
        raise ConfigError(f"section {name!r} in {source} must be a mapping, got {type(section).__name__}")
    unknown = sorted(set(section) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in section {name!r} of {source}; accepted: {', '.join(allowed)}")
    return dict(section)


def _file_section(config_file: str | Path | None, env: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> dict:
    path = config_file or env.get("SEMDUP_CONFIG")
    if not path:
        return {}
    return _section(load_config_file(path), name, allowed, str(path))


@dataclass(frozen=True)
class OpenSearchSettings:
    """How to reach one OpenSearch cluster. Credentials inside ``url`` are moved to username/password."""

    url: str
    username: str | None = None
    password: str | None = None
    verify_certs: bool = True
    ca_certs: str | None = None
    aws_region: str | None = None
    aws_service: str = "es"
    timeout: float = 30.0
    max_retries: int = 3

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"OpenSearch URL must look like http(s)://host:port, got {redact_url(self.url)!r}")
        if parts.username is not None:  # https://user:pass@host -> fields, URL without them
            object.__setattr__(self, "username", self.username or unquote(parts.username))
            object.__setattr__(self, "password", self.password or unquote(parts.password or ""))
            host = parts.netloc.rsplit("@", 1)[1]
            object.__setattr__(self, "url", urlunsplit(parts._replace(netloc=host)))
        if self.aws_service not in ("es", "aoss"):
            raise ConfigError(
                f"aws_service must be 'es' (managed OpenSearch) or 'aoss' (Serverless), got {self.aws_service!r}"
            )
        if self.password and not self.username:
            raise ConfigError("an OpenSearch password was given without a username; set SEMDUP_OPENSEARCH_USERNAME")
        if self.username and self.aws_region:
            raise ConfigError("both basic auth (username) and AWS SigV4 (aws_region) are set; choose one")
        if self.timeout <= 0 or self.max_retries < 0:
            raise ConfigError(f"timeout must be > 0 and max_retries >= 0, got {self.timeout} and {self.max_retries}")

    @property
    def safe_url(self) -> str:
        return redact_url(self.url)

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        shown["url"] = self.safe_url
        if shown["password"] is not None:
            shown["password"] = "***"
        return "OpenSearchSettings(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    __str__ = __repr__

    @classmethod
    def from_env(
        cls, config_file: str | Path | None = None, env: Mapping[str, str] | None = None
    ) -> OpenSearchSettings:
        """Settings from the environment, else the config file, else the running embedded node.

        Raises:
            OpenSearchUnavailable: no URL anywhere and no embedded node running.
            ConfigError: a malformed value or config file.
        """
        env = os.environ if env is None else env
        names = tuple(f.name for f in fields(cls))
        values: dict[str, Any] = _file_section(config_file, env, "opensearch", names)
        env_names = {
            "username": "SEMDUP_OPENSEARCH_USERNAME",
            "password": "SEMDUP_OPENSEARCH_PASSWORD",
            "verify_certs": "SEMDUP_OPENSEARCH_VERIFY_CERTS",
            "ca_certs": "SEMDUP_OPENSEARCH_CA_CERTS",
            "aws_region": "SEMDUP_AWS_REGION",
            "aws_service": "SEMDUP_AWS_SERVICE",
            "timeout": "SEMDUP_OPENSEARCH_TIMEOUT",
            "max_retries": "SEMDUP_OPENSEARCH_MAX_RETRIES",
        }
        url = env.get("SEMDUP_OPENSEARCH_URL") or env.get("OPENSEARCH_URL")
        if url:
            values["url"] = url
        for field_name, var in env_names.items():
            if env.get(var):
                values[field_name] = env[var]
        if "verify_certs" in values:
            values["verify_certs"] = parse_bool("verify_certs", values["verify_certs"])
        if "timeout" in values:
            values["timeout"] = _parse_number("timeout", values["timeout"], float)
        if "max_retries" in values:
            values["max_retries"] = _parse_number("max_retries", values["max_retries"], int)
        if not values.get("url"):
            from semdup.deploy.local_opensearch import default_state_dir, running_url

            values["url"] = running_url()
            if values["url"] is None:
                raise OpenSearchUnavailable(
                    "no OpenSearch at SEMDUP_OPENSEARCH_URL, OPENSEARCH_URL or a config file, and no embedded "
                    f"node running (state {default_state_dir()}); {_START_HINT}"
                )
            logger.info("using the embedded OpenSearch at %s", values["url"])
        for key in ("url", "username", "password", "ca_certs", "aws_region", "aws_service"):
            if values.get(key) is not None:
                values[key] = str(values[key])
        return cls(**values)

    def with_url(self, url: str) -> OpenSearchSettings:
        return replace(self, url=url)


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


def connect(settings: OpenSearchSettings, check: bool = True) -> Any:
    """An ``opensearchpy.OpenSearch`` client for ``settings``, checked with ``GET /`` unless ``check=False``.

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
    kwargs["pool_maxsize"] = _POOL_MAXSIZE
    client = OpenSearch(**kwargs)
    if check and settings.aws_service != "aoss":  # Serverless has no GET /
        _probe(client, settings)
    return client


# Connections kept open per node: the service and the benchmarks call from several threads, and urllib3's default
# of one makes every concurrent call beyond the first open (and drop) a connection of its own.
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
        raise OpenSearchUnavailable(f"no OpenSearch at {url} ({type(exc.info).__name__}); {_START_HINT}") from exc
    except TransportError as exc:
        client.close()
        raise OpenSearchUnavailable(
            f"OpenSearch at {url} answered HTTP {exc.status_code} to GET /: {exc.error}"
        ) from exc
    version = (info.get("version") or {}).get("number", "?")
    logger.info("connected to OpenSearch %s at %s", version, url)


@dataclass(frozen=True)
class BrokerSettings:
    """Where the Celery broker is: ``redis://``, ``rediss://`` or ``amqp://`` URL."""

    url: str

    def __post_init__(self) -> None:
        scheme = urlsplit(self.url).scheme
        if scheme not in _BROKER_SCHEMES:
            raise ConfigError(
                f"broker URL must start with one of {', '.join(s + '://' for s in _BROKER_SCHEMES)}, "
                f"got {redact_url(self.url)!r}"
            )

    @property
    def safe_url(self) -> str:
        return redact_url(self.url)

    def __repr__(self) -> str:
        return f"BrokerSettings(url={self.safe_url!r})"

    __str__ = __repr__

    @classmethod
    def from_env(cls, config_file: str | Path | None = None, env: Mapping[str, str] | None = None) -> BrokerSettings:
        """``$SEMDUP_BROKER_URL``, else the config file's ``broker.url``, else the running embedded Redis.

        Raises:
            BrokerUnavailable: none of those gives a broker.
        """
        env = os.environ if env is None else env
        url = env.get("SEMDUP_BROKER_URL") or _file_section(config_file, env, "broker", ("url",)).get("url")
        if not url:
            from semdup.deploy.local_redis import default_state_dir, running_url

            url = running_url()
            if url is None:
                raise BrokerUnavailable(
                    "no broker at SEMDUP_BROKER_URL or a config file, and no embedded Redis running "
                    f"(state {default_state_dir()}); start it with `semdup broker start` or set SEMDUP_BROKER_URL"
                )
            logger.info("using the embedded Redis broker at %s", url)
        return cls(url=str(url))


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
