"""A span's attributes as one flat mapping, whatever form they came in.

Instrumentations write the same facts three ways: flattened keys (``llm.input_messages.0.message.content``,
as OpenInference's OTLP export does), nested objects (Phoenix's spans dataframe, JSON exports), and values
that are JSON text (``gen_ai.input.messages``, as the GenAI conventions recommend). ``flatten`` brings the
first two to dotted keys, and ``value_at`` reads a fact back as a structure from either, parsing JSON text
where a structure is expected."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any, Final, cast

Flat = dict[str, Any]

#: How deep an attribute may nest (levels of a nested value, or dots in a flattened key). The deepest that
#: instrumentations write is about ten (``llm.input_messages.0.message.contents.0.message_content.image.url``);
#: the bound keeps every recursive reader far from Python's recursion limit, so a value nested 50,000 levels
#: deep is refused by name instead of ending in a RecursionError.
MAX_DEPTH: Final = 64
#: 64-bit integers as OTLP's JSON writes them (text), and the non-finite doubles of protobuf's JSON mapping.
_INTEGER: Final = re.compile(r"-?[0-9]{1,20}")
_SPECIAL_DOUBLES: Final = frozenset({"NaN", "Infinity", "-Infinity"})


class UnreadableAttribute(ValueError):
    """An attribute that should hold a structure and holds text that is no JSON."""


def flatten(value: Any, prefix: str = "", into: Flat | None = None) -> Flat:
    """``value`` (a mapping of attributes, nested or not) as dotted keys; list items are numbered keys. A value
    or key nested deeper than :data:`MAX_DEPTH` raises a ValueError naming it."""
    out: Flat = {} if into is None else into
    if prefix.count(".") >= MAX_DEPTH:
        raise ValueError(f"attribute {prefix[:80]!r}... nests deeper than {MAX_DEPTH} levels")
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
            except RecursionError:  # JSON text nested past what Python's parser takes
                raise UnreadableAttribute(f"{name} nests deeper than JSON can be read") from None
        return value
    return _unflatten(flat, name)


def text_at(flat: Flat, name: str) -> str | None:
    """The attribute ``name`` as text (None when absent or blank); a structure is written back as JSON."""
    value = value_at(flat, name)
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if text.strip() else None


def _short(value: Any) -> str:
    return repr(value)[:60]


def otlp_value(value: Any, path: str = "", depth: int = 0) -> Any:
    """An OTLP JSON ``AnyValue`` (``{"stringValue": ...}``, ``{"arrayValue": {"values": [...]}}``, ...) as a
    plain value; 64-bit integers come as JSON text in OTLP and are numbers here. Anything that is no AnyValue
    raises a ValueError naming the attribute (``path``): the export's line is refused, never guessed at."""
    where = f"attribute {path!r}" if path else "a value"
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} is not an OTLP AnyValue object: {_short(value)}")
    if depth > MAX_DEPTH:
        raise ValueError(f"{where} nests deeper than {MAX_DEPTH} levels")
    if not value:
        return None  # an AnyValue with nothing set: protobuf's JSON writes it as {}
    # one field set, as protobuf writes an AnyValue; two are no AnyValue
    kind, raw = next(iter(value.items())) if len(value) == 1 else ("", value)
    raw = cast(Any, raw)
    if kind == "stringValue" and isinstance(raw, str):
        return raw
    if kind == "boolValue" and isinstance(raw, bool):
        return raw
    if kind == "intValue" and (_INTEGER.fullmatch(raw) if isinstance(raw, str) else
                               isinstance(raw, int) and not isinstance(raw, bool)):
        return int(raw)
    if kind == "doubleValue" and ((isinstance(raw, int | float) and not isinstance(raw, bool))
                                  or raw in _SPECIAL_DOUBLES):
        return float(raw)
    if kind == "arrayValue" and isinstance(raw, Mapping) and isinstance(items := raw.get("values") or [], list):
        return [otlp_value(v, f"{path}.{i}", depth + 1) for i, v in enumerate(items)]
    if kind == "kvlistValue" and isinstance(raw, Mapping):
        return otlp_attributes(raw.get("values"), path, depth + 1)
    if kind == "bytesValue" and isinstance(raw, str):
        try:
            return base64.b64decode(raw, validate=True).hex()
        except (binascii.Error, ValueError):
            pass
    raise ValueError(f"{where} is not an OTLP AnyValue (one of stringValue, boolValue, intValue, doubleValue, "
                     f"arrayValue, kvlistValue, bytesValue, of its type): {_short(value)}")


def otlp_attributes(pairs: Any, path: str = "", depth: int = 0) -> dict[str, Any]:
    """OTLP's list of ``{"key": ..., "value": AnyValue}`` as a mapping; anything else raises a ValueError
    naming the attribute (``path``: the name of the attribute these pairs are the value of, if any)."""
    inside = f" of attribute {path!r}" if path else ""
    if pairs is None:
        return {}
    if not isinstance(pairs, list):
        raise ValueError(f"the attributes{inside} are not a list: {_short(pairs)}")
    out: dict[str, Any] = {}
    for pair in pairs:
        if not isinstance(pair, Mapping) or not isinstance(pair.get("key"), str):
            raise ValueError(f"an attribute{inside} is not a {{key, value}} object: {_short(pair)}")
        key: str = pair["key"]
        value = pair.get("value")
        out[key] = otlp_value({} if value is None else value, f"{path}.{key}" if path else key, depth)
    return out
