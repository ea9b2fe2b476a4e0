"""What one span says, in either convention: whether it is an LLM call, a retriever or a tool, and the
answer, the messages before it, the model and the passages it holds (docs/traces.md has the table).

OpenInference (Phoenix, LlamaIndex, LangChain): ``openinference.span.kind`` LLM / RETRIEVER / TOOL,
``llm.input_messages`` / ``llm.output_messages``, ``input.value`` / ``output.value``, ``llm.model_name``,
``retrieval.documents``. OpenTelemetry GenAI: ``gen_ai.operation.name`` (chat, text_completion,
generate_content; execute_tool; retrieval), ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (parts),
``gen_ai.response.model`` / ``gen_ai.request.model``, ``gen_ai.tool.call.result``, and the older
``gen_ai.prompt`` / ``gen_ai.completion``. Older instrumentations put the messages in span events instead
(``gen_ai.content.prompt`` / ``gen_ai.content.completion`` with those attributes, as OpenLLMetry wrote them;
``gen_ai.user.message`` ... ``gen_ai.choice`` with the message in ``gen_ai.event.content`` or its own
attributes, as the GenAI event conventions had them recorded on spans): they are read where the attributes
hold none. An LLM span with no answer anywhere says so in its ``problem``: its row is never a perfect score."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from faithfulness_pipeline.core.messages import parse_result, render_tool_result
from faithfulness_pipeline.traces.attributes import Flat, UnreadableAttribute, text_at, value_at
from faithfulness_pipeline.traces.spans import Span

Role = Literal["llm", "context", "other"]
Message = dict[str, str | None]

_GENAI_LLM: Final = frozenset({"chat", "text_completion", "generate_content", "completion"})
_GENAI_RETRIEVAL: Final = frozenset({"retrieval", "retrieve", "embeddings_retrieval"})
#: Span events that hold an answer, and those that hold a message given to the model (by its role).
_ANSWER_EVENTS: Final = frozenset({"gen_ai.content.completion", "gen_ai.choice"})
_MESSAGE_EVENTS: Final = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                          "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
#: Why the row of an LLM span without an answer has nothing to judge.
NO_ANSWER: Final = "the span holds no answer (none in its attributes or its events)"


@dataclass(slots=True)
class SpanFacts:
    role: Role
    output: str | None = None
    messages: list[Message] = field(default_factory=list)
    model: str | None = None
    passages: list[str] = field(default_factory=list)
    problem: str | None = None  # why an LLM span could not be read (its row then has nothing to judge)


def _kind(flat: Flat) -> tuple[str, str]:
    oi_kind = str(flat.get("openinference.span.kind") or "").upper()
    return oi_kind, str(flat.get("gen_ai.operation.name") or "").lower()


def _content_text(content: Any) -> str | None:
    """A message's content as text: a string, or the text parts of a list of parts in either convention."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [t for part in content if (t := _part_text(part)) is not None]
        return "\n".join(texts) if texts else None
    return None


def _part_text(part: Any) -> str | None:
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        return None
    inner = part.get("message_content", part)  # OpenInference wraps each part in message_content
    if not isinstance(inner, Mapping) or inner.get("type", "text") != "text":
        return None
    text = inner.get("text", inner.get("content"))
    return text if isinstance(text, str) else None


def _oi_message(item: Any) -> Message | None:
    message = item.get("message", item) if isinstance(item, Mapping) else None
    if not isinstance(message, Mapping):
        return None
    content = message.get("content")
    text = _content_text(content if content is not None else message.get("contents"))
    name = message.get("name") if isinstance(message.get("name"), str) else None
    call_id = message.get("tool_call_id") if isinstance(message.get("tool_call_id"), str) else None
    return {"role": str(message.get("role") or "user"), "content": text, "name": name, "tool_call_id": call_id}


def _genai_messages(raw: Any) -> list[Message]:
    """GenAI messages (``role`` + ``parts``; a tool's reply is a ``tool_call_response`` part) as chat messages;
    also the older shape of plain ``role`` + ``content``."""
    out: list[Message] = []
    names: dict[str, str] = {}
    for message in raw if isinstance(raw, list) else []:
        if not isinstance(message, Mapping):
            continue
        role = str(message.get("role") or "user")
        parts = message.get("parts")
        if not isinstance(parts, list):
            out.append({"role": role, "content": _content_text(message.get("content")), "name": None,
                        "tool_call_id": None})
            continue
        texts: list[str] = []
        for part in parts:
            if not isinstance(part, Mapping):
                continue
            kind = part.get("type")
            if kind == "tool_call" and isinstance(part.get("id"), str) and isinstance(part.get("name"), str):
                names[part["id"]] = part["name"]
            elif kind == "tool_call_response":
                result = part.get("response", part.get("result"))
                call = part.get("id") if isinstance(part.get("id"), str) else None
                out.append({"role": "tool", "name": names.get(call or ""), "tool_call_id": call,
                            "content": result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)})
            elif (text := _part_text(part)) is not None:
                texts.append(text)
        if texts or role != "tool":
            out.append({"role": role, "content": "\n".join(texts) or None, "name": None, "tool_call_id": None})
    return out


def _messages(flat: Flat, oi: str, genai: str, genai_old: str, plain: str | None) -> list[Message]:
    items = value_at(flat, oi)
    if isinstance(items, list):
        return [m for item in items if (m := _oi_message(item)) is not None]
    for name in (genai, genai_old):
        try:
            raw = value_at(flat, name, structured=True)
        except UnreadableAttribute:
            if name != genai_old:
                raise
            raw = text_at(flat, name)  # the older gen_ai.prompt / gen_ai.completion: plain text is the message
        if raw is not None:
            return _genai_messages(raw) if isinstance(raw, list) else [
                {"role": "user", "content": _content_text(raw) or json.dumps(raw, ensure_ascii=False),
                 "name": None, "tool_call_id": None}]
    text = None if plain is None else text_at(flat, plain)
    return [] if text is None else [{"role": "user", "content": text, "name": None, "tool_call_id": None}]


def _answer(flat: Flat) -> str | None:
    # A plain-text completion comes back as one "user" message of _messages: it is the answer all the same.
    said = [m for m in _messages(flat, "llm.output_messages", "gen_ai.output.messages", "gen_ai.completion", None)
            if m["role"] in ("assistant", "model", "user") and m["content"]]
    if said:
        return said[-1]["content"]
    text = text_at(flat, "output.value")
    if text is not None and text.lstrip().startswith("{"):
        # an OpenAI response body written whole into output.value
        try:
            choice = json.loads(text)["choices"][0]
            return _content_text(choice["message"]["content"]) or text
        except (ValueError, KeyError, IndexError, TypeError):
            return text
    return text


def _event_content(flat: Flat) -> Any:
    """What a GenAI event says: ``gen_ai.event.content`` (JSON text of the event's body) or the attributes."""
    body = value_at(flat, "gen_ai.event.content", structured=True)
    return body if isinstance(body, Mapping) else flat


def _event_answer(events: tuple[tuple[str, Flat], ...]) -> str | None:
    """The last answer the span's events hold (older instrumentations record it there, not in attributes)."""
    for name, flat in reversed(events):
        if name not in _ANSWER_EVENTS:
            continue
        if (said := _answer(flat)) is not None:  # gen_ai.content.completion: gen_ai.completion, as attributes
            return said
        body = _event_content(flat)
        message = body.get("message")  # a choice's body: {"index", "finish_reason", "message": {...}}
        content = message.get("content") if isinstance(message, Mapping) else value_at(flat, "message.content")
        if (text := _content_text(content)) and text.strip():
            return text
    return None


def _event_messages(events: tuple[tuple[str, Flat], ...]) -> list[Message]:
    """The messages the span's events say it was given, where its attributes hold none."""
    out: list[Message] = []
    for name, flat in events:
        if name == "gen_ai.content.prompt":
            out.extend(_messages(flat, "llm.input_messages", "gen_ai.input.messages", "gen_ai.prompt", None))
        elif name in _MESSAGE_EVENTS:
            body = _event_content(flat)
            content = body.get("content") if isinstance(body, Mapping) else None
            out.append({"role": _MESSAGE_EVENTS[name], "content": _content_text(content), "name": None,
                        "tool_call_id": body.get("id") if isinstance(body.get("id"), str) else None})
    return out


def _documents(flat: Flat) -> list[str]:
    docs = value_at(flat, "retrieval.documents")
    if docs is None:
        docs = value_at(flat, "gen_ai.retrieval.documents", structured=True)
    out: list[str] = []
    for doc in docs if isinstance(docs, list) else []:
        inner = doc.get("document", doc) if isinstance(doc, Mapping) else doc
        text = inner.get("content") if isinstance(inner, Mapping) else inner
        if isinstance(text, str) and text.strip():
            out.append(text)
    return out


def _tool_result(span: Span, flat: Flat) -> list[str]:
    result = value_at(flat, "gen_ai.tool.call.result")
    if result is None:
        result = value_at(flat, "output.value")
    if result is None:
        return []
    name = flat.get("tool.name") or flat.get("gen_ai.tool.name") or span.name or None
    return [render_tool_result(str(name) if name else None, parse_result(result))]


def read_span(span: Span) -> SpanFacts:
    """What ``span`` holds for scoring. An LLM span whose messages cannot be read still comes back as an LLM
    span, with its problem: the row stays, with nothing to judge."""
    flat = span.attributes
    oi_kind, operation = _kind(flat)
    if oi_kind == "LLM" or operation in _GENAI_LLM:
        model = flat.get("llm.model_name") or flat.get("gen_ai.response.model") or flat.get("gen_ai.request.model")
        facts = SpanFacts("llm", model=str(model) if model else None)
        try:
            facts.messages = _messages(flat, "llm.input_messages", "gen_ai.input.messages", "gen_ai.prompt",
                                       "input.value") or _event_messages(span.events)
            facts.output = _answer(flat) or _event_answer(span.events)
        except UnreadableAttribute as why:
            facts.problem = str(why)
        except RecursionError:  # JSON text nested as deep as the parser takes, too deep to write back
            facts.problem = "an attribute nests too deep to be read"
        if facts.output is None and facts.problem is None:
            facts.problem = NO_ANSWER
        return facts
    try:
        if oi_kind == "RETRIEVER" or operation in _GENAI_RETRIEVAL:
            return SpanFacts("context", passages=_documents(flat))
        if oi_kind == "TOOL" or operation == "execute_tool":
            return SpanFacts("context", passages=_tool_result(span, flat))
    except (UnreadableAttribute, RecursionError):
        return SpanFacts("context")
    return SpanFacts("other")
