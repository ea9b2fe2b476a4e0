"""A span's attributes as one flat mapping, whatever form they came in.

Instrumentations write the same facts three ways: flattened keys (``llm.input_messages.0.message.content``,
as OpenInference's OTLP export does), nested objects (Phoenix's spans dataframe, JSON exports), and values
that are JSON text (``gen_ai.input.messages``, as the GenAI conventions recommend). ``flatten`` brings the
first two to dotted keys, and ``value_at`` reads a fact back as a structure from either, parsing JSON text
where a structure is expected."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

Flat = dict[str, Any]


class UnreadableAttribute(ValueError):
    """An attribute that should hold a structure and holds text that is no JSON."""


def flatten(value: Any, prefix: str = "", into: Flat | None = None) -> Flat:
    """``value`` (a mapping of attributes, nested or not) as dotted keys; list items are numbered keys."""
    out: Flat = {} if into is None else into
    if isinstance(value, Mapping):
        for key, item in value.items():
            flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, list | tuple) and value and any(isinstance(v, Mapping | list) for v in value):
        for i, item in enumerate(value):
            flatten(item, f"{prefix}.{i}", out)
    elif prefix:
        out[prefix] = value
    return out


def _unflatten(flat: Flat, prefix: str) -> Any:
    """The keys under ``prefix.`` rebuilt into lists (where every sub-key is a number) and mappings."""
    tree: dict[str, Any] = {}
    start = prefix + "."
    for key, value in flat.items():
        if not key.startswith(start):
            continue
        node = tree
        parts = key[len(start):].split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):  # a scalar and a structure under one name: the structure wins
                child = node[part] = {}
            node = child
        node.setdefault(parts[-1], value)
    return _as_lists(tree) if tree else None


def _as_lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    items = {k: _as_lists(v) for k, v in node.items()}
    if items and all(k.isdigit() for k in items):
        return [items[k] for k in sorted(items, key=int)]
    return items


def value_at(flat: Flat, name: str, *, structured: bool = False) -> Any:
    """The attribute ``name``: its own value, or the structure its dotted sub-keys make. With ``structured``,
    text is parsed as JSON (a GenAI messages attribute), and text that is not JSON raises
    :class:`UnreadableAttribute`."""
    if name in flat and flat[name] is not None:
        value = flat[name]
        if structured and isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                raise UnreadableAttribute(f"{name} is not JSON: {value[:60]!r}") from None
        return value
    return _unflatten(flat, name)


def text_at(flat: Flat, name: str) -> str | None:
    """The attribute ``name`` as text (None when absent or blank); a structure is written back as JSON."""
    value = value_at(flat, name)
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if text.strip() else None


def otlp_value(value: Mapping[str, Any]) -> Any:
    """An OTLP JSON ``AnyValue`` (``{"stringValue": ...}``, ``{"arrayValue": {"values": [...]}}``, ...) as
    a plain value; 64-bit integers come as JSON text in OTLP and are numbers here."""
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [otlp_value(v) for v in (value["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in value:
        return otlp_attributes((value["kvlistValue"] or {}).get("values", []))
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"]).hex()
    return None


def otlp_attributes(pairs: Any) -> dict[str, Any]:
    """OTLP's list of ``{"key": ..., "value": AnyValue}`` as a mapping."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        if isinstance(pair, Mapping) and "key" in pair:
            out[str(pair["key"])] = otlp_value(pair.get("value") or {})
    return out
