"""Where semdup's OpenSearch cluster and Celery broker are, and how to log in to them: the frozen settings the
clients take (:mod:`semdup.opensearch_io.clients`), and the helpers every settings reader uses (the config file reader,
booleans, URLs with their passwords masked).

Nothing here reads the environment: the composition root reads every setting once, into one tree
(:mod:`semdup.apps.settings`), and passes these down::

    settings = load_settings().opensearch_settings()   # semdup.apps.settings: env, else config file
    client = connect(settings)                          # semdup.opensearch_io.clients: checked with GET /

Only ``semdup demo`` and the tests use the embedded local OpenSearch / Redis (:mod:`semdup.devstack`), and they
pass its URL explicitly. Passwords never appear in ``repr``, logs or error messages (:func:`redact_url`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from semdup.core.errors import ConfigError

__all__ = [
    "OpenSearchSettings",
    "BrokerSettings",
    "redact_url",
    "load_config_file",
    "parse_bool",
    "parse_auto_bool",
]

logger = logging.getLogger(__name__)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
START_HINT = (
    "set SEMDUP_OPENSEARCH_URL (for a local run, `semdup opensearch start` prints the URL of an embedded node)"
)
_BROKER_SCHEMES = ("redis", "rediss", "amqp", "amqps", "pyamqp")


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


def parse_auto_bool(name: str, value: Any) -> bool | None:
    """None for unset, empty or ``auto`` (the setting follows what the index offers); else :func:`parse_bool`."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    return parse_bool(name, value)


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
