"""Span exports as the OpenTelemetry Collector's file exporter writes them (JSON Lines of OTLP
``ExportTraceServiceRequest``), built by hand from plain attribute mappings, for the traces tests."""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

T0 = 1_764_892_800_000_000_000  # 2025-12-05 00:00 UTC in nanoseconds


def any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, Mapping):
        return {"kvlistValue": {"values": [{"key": k, "value": any_value(v)} for k, v in value.items()]}}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def span(trace: str, own: str, name: str, attributes: Mapping[str, Any], start_s: float, parent: str = "",
         events: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> dict:
    out = {"traceId": trace, "spanId": own, "parentSpanId": parent, "name": name, "kind": 1,
           "startTimeUnixNano": str(T0 + int(start_s * 1e9)), "endTimeUnixNano": str(T0 + int((start_s + 1) * 1e9)),
           "attributes": [{"key": k, "value": any_value(v)} for k, v in attributes.items()]}
    if events:  # span events, as older instrumentations record prompts and completions
        out["events"] = [{"timeUnixNano": str(T0 + int(start_s * 1e9)), "name": event,
                          "attributes": [{"key": k, "value": any_value(v)} for k, v in fields.items()]}
                         for event, fields in events]
    return out


def request(spans: Sequence[dict]) -> dict:
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "rag"}}]},
                               "scopeSpans": [{"scope": {"name": "test"}, "spans": list(spans)}]}]}


def write_export(path: Path, requests: Sequence[dict], packed: bool = False) -> Path:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests)
    if packed:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def oi_llm(question: str, answer: str | None, model: str = "gpt-4o-mini") -> dict[str, Any]:
    """OpenInference LLM span attributes, flattened as its OTLP export writes them."""
    out: dict[str, Any] = {"openinference.span.kind": "LLM", "llm.model_name": model,
                           "llm.input_messages.0.message.role": "system",
                           "llm.input_messages.0.message.content": "Answer from the documents.",
                           "llm.input_messages.1.message.role": "user",
                           "llm.input_messages.1.message.content": question}
    if answer is not None:
        out |= {"llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": answer}
    return out


def oi_retriever(*documents: str) -> dict[str, Any]:
    out: dict[str, Any] = {"openinference.span.kind": "RETRIEVER"}
    for i, doc in enumerate(documents):
        out[f"retrieval.documents.{i}.document.content"] = doc
        out[f"retrieval.documents.{i}.document.id"] = f"doc-{i}"
    return out


def genai_chat(question: str, answer: str, model: str = "claude-x") -> dict[str, Any]:
    """GenAI chat span attributes: messages as JSON text with parts, as the conventions recommend."""
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.response.model": model + "-001",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": question}]}],
                                                ensure_ascii=False),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": answer}],
                                                   "finish_reason": "stop"}], ensure_ascii=False)}


def genai_tool(name: str, result: Any) -> dict[str, Any]:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
            "gen_ai.tool.call.result": json.dumps(result, ensure_ascii=False)}
