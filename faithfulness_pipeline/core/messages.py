"""Reading OpenAI-format chat messages: message text, the judged answer and question, and tool results.

Messages arrive as python dicts (polars ``to_list`` of a list<struct> column). Real logs are messy, so
every reader here tolerates missing roles, unknown roles, ``content`` as a list of parts (the multimodal
shape) and tool calls without results; none of them raises on odd data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Message = Mapping[str, Any]


def message_text(message: Message) -> str | None:
    """The text of a message: ``content`` as a string, or the text parts of a list of parts joined."""
    content = message.get("content")
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        content = [content]
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str) and part.get("type") in (None, "text", "input_text", "output_text"):
                    texts.append(text)
        return "\n".join(texts) if texts else None
    return str(content)


def _role(message: Message) -> str | None:
    role = message.get("role")
    return role.strip().lower() if isinstance(role, str) else None


def _has_text(message: Message) -> bool:
    text = message_text(message)
    return text is not None and text.strip() != ""


def assistant_turn_indexes(messages: Sequence[Message]) -> list[int]:
    """Positions of the assistant messages that carry text (tool-call-only messages are not answers)."""
    return [i for i, m in enumerate(messages) if _role(m) == "assistant" and _has_text(m)]


def question_before(messages: Sequence[Message], answer_index: int) -> str | None:
    """The user message(s) of the turn that the answer at ``answer_index`` replies to.

    That is the user messages after the previous assistant answer; when there are none (the user spoke
    earlier), the last user message before the answer.
    """
    current: list[str] = []
    last_user: str | None = None
    for message in messages[:answer_index]:
        role = _role(message)
        if role == "assistant" and _has_text(message):
            current = []
        elif role == "user":
            text = message_text(message)
            if text is not None and text.strip():
                current.append(text)
                last_user = text
    if current:
        return "\n\n".join(current)
    return last_user


def parse_result(raw: Any) -> Any:
    """A tool result as JSON when it is JSON text (so it renders like Mastra's object results)."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def render_tool_result(tool: str | None, result: Any) -> str:
    """``{"tool": name, "result": result}`` as compact JSON, like Mastra's ``JSON.stringify``."""
    return json.dumps({"tool": tool, "result": result}, ensure_ascii=False, separators=(",", ":"), default=str)


@dataclass(frozen=True, slots=True)
class _ToolCall:
    name: str | None
    has_result: bool
    result: Any


def _tool_calls(message: Message) -> list[tuple[str | None, _ToolCall]]:
    calls = message.get("tool_calls")
    if not isinstance(calls, Sequence) or isinstance(calls, str):
        return []
    out: list[tuple[str | None, _ToolCall]] = []
    for call in calls:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        name = name if isinstance(name, str) else call.get("name") if isinstance(call.get("name"), str) else None
        # Some logs (Vercel AI SDK style) keep the result on the call itself.
        has_result = call.get("result") is not None
        call_id = call.get("id") if isinstance(call.get("id"), str) else None
        out.append((call_id, _ToolCall(name, has_result, parse_result(call.get("result")))))
    return out


def tool_results_before(messages: Sequence[Message], answer_index: int) -> list[str]:
    """Tool results visible to the answer at ``answer_index``, rendered as Mastra's ``extractToolResults``.

    Tool-role messages are named by their ``name`` or, failing that, by the assistant tool call whose id
    they answer. Tool calls that never got a result contribute nothing.
    """
    names_by_id: dict[str, str | None] = {}
    rendered: list[str] = []
    for message in messages[:answer_index]:
        role = _role(message)
        if role == "assistant":
            for call_id, call in _tool_calls(message):
                if call_id is not None:
                    names_by_id[call_id] = call.name
                if call.has_result:
                    rendered.append(render_tool_result(call.name, call.result))
        elif role in ("tool", "function"):
            text = message_text(message)
            if text is None:
                continue
            name = message.get("name") if isinstance(message.get("name"), str) else None
            if name is None:
                call_id = message.get("tool_call_id")
                name = names_by_id.get(call_id) if isinstance(call_id, str) else None
            rendered.append(render_tool_result(name, parse_result(text)))
    return rendered
