"""The two ml-commons cluster settings a connector to semdup's service needs, checked and (where allowed) set.

* ``plugins.ml_commons.trusted_connector_endpoints_regex`` (2.9+): a connector's URL must match one of its regular
  expressions. Setting it replaces the default list, so semdup's expression is added to the effective one.
* ``plugins.ml_commons.connector.private_ip_enabled`` (2.15+): a connector may not call a private or loopback
  address (10/8, 172.16/12, 192.168/16, 127/8 …) unless it is true. semdup's service usually runs beside the
  cluster, on such an address.

:func:`needed_settings` says which values the cluster lacks for a service URL; :func:`apply_settings` puts them (a
user without the right gets the exact ``PUT _cluster/settings`` body to run, in a :class:`SettingsRefused`);
``semdup pipeline remove`` puts back what ``create`` changed (recorded on the connector).
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from semdup.core.errors import ConfigError, OpenSearchRefused

__all__ = ["TRUSTED", "PRIVATE_IP", "SettingsChange", "SettingsRefused", "needed_settings", "apply_settings",
           "endpoint_regex", "is_private", "matches", "restore_body"]  # fmt: skip

TRUSTED = "plugins.ml_commons.trusted_connector_endpoints_regex"
PRIVATE_IP = "plugins.ml_commons.connector.private_ip_enabled"


class SettingsRefused(ConfigError):
    """The user may not change cluster settings; the message holds the body an administrator can run."""


@dataclass(frozen=True)
class SettingsChange:
    """What the cluster needs for one service URL: the regex list to set (None: it matches already) and whether
    private addresses must be enabled; ``added`` is semdup's own regex when it was added."""

    trusted: list[str] | None
    private_ip: bool
    added: str | None
    trusted_was_default: bool = True

    @property
    def empty(self) -> bool:
        return self.trusted is None and not self.private_ip

    def body(self) -> dict[str, Any]:
        """The ``PUT _cluster/settings`` body."""
        persistent: dict[str, Any] = {}
        if self.trusted is not None:
            persistent[TRUSTED] = self.trusted
        if self.private_ip:
            persistent[PRIVATE_IP] = True
        return {"persistent": persistent}


def endpoint_regex(service_url: str) -> str:
    """The regex semdup adds for its service: its scheme, host and port, any path."""
    base = service_url.rstrip("/")
    return f"^{re.escape(base)}/.*$"


def is_private(service_url: str) -> bool:
    """True when the service's host is (or resolves to) a private, loopback or link-local address."""
    host = urlsplit(service_url).hostname or ""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False  # unresolvable here; the cluster will say so when it calls
    return any(ipaddress.ip_address(a.split("%")[0]).is_private or ipaddress.ip_address(a.split("%")[0]).is_loopback
               for a in addresses)  # fmt: skip


def _levels(client: Any) -> dict[str, dict[str, Any]]:
    got = client.cluster.get_settings(params={"include_defaults": "true", "flat_settings": "true"})
    return {level: got.get(level) or {} for level in ("defaults", "persistent", "transient")}


def _defaults(client: Any, levels: dict[str, dict[str, Any]]) -> list[str]:
    """ml-commons' own regex list. ``include_defaults`` leaves out a setting that is set, so while the list is set
    the default is read by resetting it (the caller puts the list back when more than the default is left)."""
    if any(k == TRUSTED or k.startswith(TRUSTED + ".") for k in levels["defaults"]):
        return _regexes(levels["defaults"])
    client.cluster.put_settings(body={"persistent": {TRUSTED: None}})
    return _regexes(_levels(client)["defaults"])


def _effective(levels: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for level in ("defaults", "persistent", "transient"):  # later levels win
        out.update(levels[level])
    return out


def _regexes(effective: dict[str, Any]) -> list[str]:
    found = _as_list(effective.get(TRUSTED))
    if not found:  # a flat list setting comes back as TRUSTED.0, TRUSTED.1 …
        flat = [(int(k.rsplit(".", 1)[1]), v) for k, v in effective.items()
                if k.startswith(TRUSTED + ".") and k.rsplit(".", 1)[1].isdigit()]  # fmt: skip
        found = [v for _, v in sorted(flat)]  # by position: as text, TRUSTED.10 would sort before TRUSTED.2
    return found


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return [value]
        return [str(v) for v in parsed] if isinstance(parsed, list) else [value]
    return [str(v) for v in value]


def needed_settings(client: Any, service_url: str) -> SettingsChange:
    """What the cluster must change so a connector may call ``service_url`` (nothing when it may already)."""
    levels = _levels(client)
    effective = _effective(levels)
    regexes = _regexes(effective)
    explicit = any(k == TRUSTED or k.startswith(TRUSTED + ".")
                   for lv in ("persistent", "transient") for k in levels[lv])
    probe = service_url.rstrip("/") + "/v1/search/rewrite"
    trusted, added = None, None
    if not any(matches(r, probe) for r in regexes):
        added = endpoint_regex(service_url)
        trusted = [*regexes, added]
    private = str(effective.get(PRIVATE_IP, "false")).lower() != "true" and is_private(service_url)
    return SettingsChange(trusted, private, added, not explicit)


def matches(regex: str, url: str) -> bool:
    try:
        return re.fullmatch(regex, url) is not None
    except re.error:
        return False


def apply_settings(client: Any, change: SettingsChange) -> None:
    """Put ``change`` on the cluster.

    Raises:
        SettingsRefused: the user may not (403); its message holds the body to run as an administrator.
    """
    if change.empty:
        return
    try:
        client.cluster.put_settings(body=change.body())
    except OpenSearchRefused as exc:
        if exc.status != 403:
            raise
        raise SettingsRefused(
            "this user may not change cluster settings; ask an administrator to run\n"
            f"  PUT _cluster/settings\n  {json.dumps(change.body())}\nthen run `semdup pipeline create` again"
        ) from exc


def restore_body(client: Any, added: str | None, trusted_was_default: bool, private_ip: bool) -> dict[str, Any]:
    """The ``persistent`` settings that take back what a :class:`SettingsChange` put: semdup's regex out of the
    list (the setting reset when it was the default before and nothing else was added since), private addresses
    back to their default. ``added`` None and ``private_ip`` False: nothing (``{}``)."""
    persistent: dict[str, Any] = {}
    if added:
        levels = _levels(client)
        rest = [r for r in _regexes(_effective(levels)) if r != added]
        # reset only when nothing else was added since (another pipeline's regex, the operator's): else the rest
        persistent[TRUSTED] = None if trusted_was_default and set(rest) <= set(_defaults(client, levels)) else rest
    if private_ip:
        persistent[PRIVATE_IP] = None
    return persistent
