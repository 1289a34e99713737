"""Keyword settings written as the settings file's TOML, so that both go through the same
checks and every refusal names the key (``sink.compresion: unknown field``)."""

from __future__ import annotations

import datetime
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

SECTIONS = ("credentials", "catalog", "window", "retry", "resubmit", "timeouts", "shutdown")


def _value(v: Any, key: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(v, datetime.timedelta):
        return json.dumps(f"{int(v.total_seconds() * 1000)}ms")
    if isinstance(v, Mapping):
        inner = ", ".join(f"{_key(k)} = {_value(x, f'{key}.{k}')}" for k, x in v.items())
        return "{ " + inner + " }"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x, f"{key}[{i}]") for i, x in enumerate(v)) + "]"
    raise TypeError(f"setting {key}: a {type(v).__name__} cannot be a setting")


def _key(k: str) -> str:
    if k and all(c.isalnum() or c in "_-" for c in k):
        return k
    return json.dumps(k)


def _section(name: str, values: Mapping[str, Any]) -> List[str]:
    lines = [f"[{name}]"]
    lines += [f"{_key(k)} = {_value(v, f'{name}.{k}')}" for k, v in values.items()]
    return lines


TableArg = Union[str, Mapping[str, Any]]


def to_toml(
    endpoint: str,
    tables: Sequence[TableArg],
    sections: Mapping[str, Optional[Mapping[str, Any]]],
    sink: Mapping[str, Any],
) -> Tuple[str, Dict[str, Any]]:
    """The settings file's text for these keywords, and the schemas the tables carried."""
    if isinstance(tables, (str, bytes)) or not isinstance(tables, Sequence):
        raise TypeError("tables: a list of table names or of {'name': ..., ...} settings")
    lines = _section("sink", {"endpoint": endpoint, **sink})
    for name in SECTIONS:
        values = sections.get(name)
        if values is not None:
            lines += [""] + _section(name, values)
    schemas: Dict[str, Any] = {}
    for i, t in enumerate(tables):
        entry = {"name": t} if isinstance(t, str) else dict(t)
        if "schema" in entry:
            schemas[str(entry.get("name"))] = entry.pop("schema")
        lines += ["", "[[table]]"]
        lines += [f"{_key(k)} = {_value(v, f'table[{i}].{k}')}" for k, v in entry.items()]
    return "\n".join(lines) + "\n", schemas
