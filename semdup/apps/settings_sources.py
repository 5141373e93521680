"""Reading the settings' sources: the environment and a config file's content as values of the tree, with where
each came from, and pydantic's validation errors as one :class:`~semdup.core.errors.ConfigError` that names the
variable or file key, what it must be and what was found (never a secret's value). Used by the sources of
:class:`semdup.apps.settings.Settings`; nothing here looks at ``os.environ`` itself (the caller passes it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from semdup.apps.sections import SECTION_TYPES
from semdup.apps.variables import BY_PATH, LEGACY_KEYS, VARIABLES
from semdup.core.errors import ConfigError
from semdup.core.settings import load_config_file, parse_auto_bool, parse_bool
from semdup.service.settings import api_keys_of

__all__ = [
    "env_values",
    "file_values",
    "mapping_values",
    "config_error",
    "read_value",
    "set_path",
    "kind_of",
    "field_names",
]


def csv_items(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(t.strip() for t in value.split(",") if t.strip())
    return value


def read_value(kind: str, where: str, value: Any) -> Any:
    """A value from the environment (text) or a file (text or YAML/TOML types), in the type its field takes."""
    if kind == "bool":
        return parse_bool(where, value)
    if kind == "auto_bool":
        return parse_auto_bool(where, value)
    if kind == "csv":
        return csv_items(value)
    if kind == "api_keys":
        return api_keys_of(value, where)
    return value


def set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    node = tree
    *parents, leaf = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value


def kind_of(path: str) -> str:
    found = BY_PATH.get(path)
    return found[0].kind if found else "text"


def env_values(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The tree's values given by ``env``, and which variable gave each (the first of a path's names that is set)."""
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for var in VARIABLES:
        raw = env.get(var.name, "")
        if var.path in origin or not str(raw).strip():  # empty counts as unset, as it always has
            continue
        set_path(values, var.path, read_value(var.kind, var.name, raw.strip()))
        origin[var.path] = var.name
    return values, origin


_SECTIONS = tuple(SECTION_TYPES)


def file_values(path: str | Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The tree's values held by the config file at ``path`` (its sections, and the flat ``reranker:`` one)."""
    return mapping_values(load_config_file(path), str(path))


def mapping_values(data: Mapping[str, Any], path: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The tree's values held by ``data``, a config file's content (read from ``path``).

    Raises:
        ConfigError: an unknown section or key (named, with the accepted ones), a section that is not a mapping.
    """
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    unknown = sorted(set(data) - set(_SECTIONS) - {"reranker"})
    if unknown:
        raise ConfigError(
            f"unknown section(s) {unknown} in config file {path}; accepted: {', '.join(_SECTIONS)}, reranker"
        )
    for name, section in data.items():
        if section is None:
            continue
        if not isinstance(section, dict):
            raise ConfigError(f"section {name!r} in {path} must be a mapping, got {type(section).__name__}")
        accepted = _accepted(name)
        bad = sorted(set(section) - set(accepted))
        if bad and name == "reranker":
            moved = "; the log format is SEMDUP_LOG_FORMAT=json now" if "log_json" in bad else ""
            raise ConfigError(f"unknown reranker setting(s) {bad} in {path}; accepted: {', '.join(accepted)}{moved}")
        if bad:
            moved = "; the log format is SEMDUP_LOG_FORMAT=json now" if "log_json" in bad else ""
            raise ConfigError(
                f"unknown key(s) {bad} in section {name!r} of {path}; accepted: {', '.join(accepted)}{moved}"
            )
        for key, value in section.items():
            where = LEGACY_KEYS[key] if name == "reranker" else f"{name}.{key}"
            if value is None:
                continue
            set_path(values, where, read_value(kind_of(where), f"{key} in section {name!r} of {path}", value))
            origin[where] = f"{path} ({name}.{key})"
    return values, origin


def _accepted(section: str) -> list[str]:
    if section == "reranker":
        return sorted(LEGACY_KEYS)
    return sorted(field_names(SECTION_TYPES[section]))


def field_names(annotation: Any) -> list[str]:
    for candidate in getattr(annotation, "__args__", (annotation,)):
        if is_dataclass(candidate):
            return [f.name for f in fields(candidate)]
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return list(candidate.model_fields)
    return []


def _expected(error: dict[str, Any]) -> str:
    kind = str(error.get("type", ""))
    return {
        "float_parsing": "a number",
        "float_type": "a number",
        "int_parsing": "a whole number",
        "int_type": "a whole number",
        "int_from_float": "a whole number",
        "bool_parsing": "true or false (1/0, yes/no, on/off)",
        "bool_type": "true or false",
        "literal_error": str(error.get("msg", "")).replace("Input should be ", "one of "),
        "string_type": "text",
        "tuple_type": "a list",
        "missing": "a value",
    }.get(kind, str(error.get("msg", "a valid value")))


def _where(path: str, env_origin: Mapping[str, str], file_origin: Mapping[str, str]) -> str:
    if path in env_origin:
        return env_origin[path]
    if path in file_origin:
        return file_origin[path]
    names = [v.name for v in BY_PATH.get(path, ())]
    return names[0] if names else path


def config_error(
    exc: ValidationError, env: Mapping[str, str], config_file: str | None, data: Mapping[str, Any] | None = None
) -> ConfigError:
    """``exc`` as one ConfigError: each bad value by its variable (or file key), what it must be, what was found."""
    env_origin = env_values(env)[1]
    try:
        if data is not None:
            file_origin = mapping_values(data, "the settings given")[1]
        else:
            file_origin = file_values(config_file)[1] if config_file else {}
    except ConfigError:
        file_origin = {}
    lines = []
    for error in exc.errors():
        loc = [str(x) for x in error.get("loc", ()) if not str(x).isdigit()]
        path = ".".join(loc[:2])
        where = _where(path, env_origin, file_origin)
        secret = any(v.secret for v in BY_PATH.get(path, ()))
        found = "a value that is not shown (a secret)" if secret else repr(error.get("input"))[:200]
        hint = next((v.expect for v in BY_PATH.get(path, ()) if v.expect), "")
        lines.append(f"{where} must be {hint or _expected(error)}, got {found}")
    how = "fix the environment variable or the config file key named"
    return ConfigError("; ".join(lines) + f" ({how})")
