"""What the mock model API (mockapi.py) reads from a request and how it answers, in each
provider's wire format: Anthropic Messages, OpenAI Responses and Chat Completions, streamed
(server-sent events) or not."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

TYPE_CHECKING = False
if TYPE_CHECKING:
    from claude_sandbox.tools.mockapi import MockAPI

MODEL = "mock-model"
# Shell tools by name: how each agent's tool takes the command. Claude Code: "Bash";
# Pi: "bash"; Codex offers one of "shell_command" / "exec_command" / "shell" depending on
# the model family and version, or the hosted "local_shell" tool type.
SHELL_ARGS: dict[str, Callable[[str], Any]] = {
    "Bash": lambda cmd: {"command": cmd, "description": "Run the command the test asked for"},
    "bash": lambda cmd: {"command": cmd},
    "shell_command": lambda cmd: {"command": cmd},
    "exec_command": lambda cmd: {"cmd": cmd},
    "shell": lambda cmd: {"command": ["bash", "-lc", cmd]},
}
# File tools by name, for a turn that writes a file with the agent's own tool rather
# than a command: Claude Code's "Write", pi's "write".
WRITE_ARGS: dict[str, Callable[[str, str], Any]] = {
    "Write": lambda path, text: {"file_path": path, "content": text},
    "write": lambda path, text: {"path": path, "content": text},
}
_TOOL_OUTPUT_ITEMS = {
    "function_call_output",
    "custom_tool_call_output",
    "local_shell_call_output",
}


def api_of(path: str) -> str | None:
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/chat/completions"):
        return "chat"
    return None


def tool_names(api: str, body: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if api == "chat" and isinstance(tool.get("function"), dict):
            names.add(str(tool["function"].get("name")))
        elif tool.get("name"):
            names.add(str(tool["name"]))
        elif tool.get("type") == "local_shell":
            names.add("local_shell")
    return names


def has_tool_result(path: str, body: Any) -> bool:
    """Whether the history sent back holds a tool result (one entry per result)."""
    return bool(tool_result_texts(path, body))


def _flatten(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_flatten(v) for v in value)
    if isinstance(value, dict):
        for key in ("text", "output", "content"):
            if key in value:
                return _flatten(value[key])
        return json.dumps(value)
    return "" if value is None else str(value)


def tool_result_texts(path: str, body: Any) -> list[str]:
    if not isinstance(body, dict):
        return []
    api = api_of(path)
    texts: list[str] = []
    if api == "anthropic":
        for msg in body.get("messages") or []:
            content = msg.get("content") if isinstance(msg, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    texts.append(_flatten(block.get("content")))
    elif api == "responses":
        items = body.get("input")
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("type") in _TOOL_OUTPUT_ITEMS:
                texts.append(_flatten(item.get("output")))
    elif api == "chat":
        for msg in body.get("messages") or []:
            if isinstance(msg, dict) and msg.get("role") == "tool":
                texts.append(_flatten(msg.get("content")))
    return texts


def _sse(events: list[dict[str, Any]], *, named: bool = True) -> bytes:
    """Server-sent events; named ones carry `event: TYPE` (Anthropic, Responses)."""
    out = []
    for event in events:
        head = f"event: {event['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(event)}\n\n")
    return "".join(out).encode()


def _usage_anthropic(output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": 12,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def anthropic(api: MockAPI, body: dict[str, Any]) -> tuple[str, bytes]:
    """Anthropic Messages: one text block, or one tool_use block for the shell tool."""
    call = api._shell_call("/v1/messages", body)
    model = str(body.get("model") or MODEL)
    if call is None:
        block: dict[str, Any] = {"type": "text", "text": api.reply_text}
        stop = "end_turn"
    else:
        block = {"type": "tool_use", "id": api._next_id("toolu"), "name": call[0],
                 "input": call[1]}
        stop = "tool_use"
    msg_id = api._next_id("msg")
    if not body.get("stream"):
        return "application/json", json.dumps({
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [block], "stop_reason": stop, "stop_sequence": None,
            "usage": _usage_anthropic(5),
        }).encode()
    start: dict[str, Any]
    if block["type"] == "text":
        start = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": block["text"]}
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": _usage_anthropic(1)}},
        {"type": "content_block_start", "index": 0, "content_block": start},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
         "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]
    return "text/event-stream", _sse(events)


def responses(api: MockAPI, body: dict[str, Any]) -> tuple[str, bytes]:
    """OpenAI Responses: one message item, or one function_call / local_shell_call item."""
    call = api._shell_call("/v1/responses", body)
    model = str(body.get("model") or MODEL)
    resp_id = api._next_id("resp")
    now = int(time.time())
    usage = {
        "input_tokens": 12, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 17,
    }

    def response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": resp_id, "object": "response", "created_at": now, "status": status,
            "model": model, "output": output, "error": None, "incomplete_details": None,
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
            "usage": usage if status == "completed" else None,
        }

    events: list[dict[str, Any]] = []
    if call is None:
        item_id = api._next_id("msg")
        text = api.reply_text
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        item: dict[str, Any] = {"type": "message", "id": item_id, "status": "completed",
                                "role": "assistant", "content": [part]}
        at = {"item_id": item_id, "output_index": 0, "content_index": 0}
        events = [
            {"type": "response.output_item.added", "output_index": 0,
             "item": {**item, "status": "in_progress", "content": []}},
            {"type": "response.content_part.added", **at,
             "part": {**part, "text": ""}},
            {"type": "response.output_text.delta", **at, "delta": text},
            {"type": "response.output_text.done", **at, "text": text},
            {"type": "response.content_part.done", **at, "part": part},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ]
    elif call[0] == "local_shell":
        item = {"type": "local_shell_call", "id": api._next_id("lsh"),
                "call_id": api._next_id("call"), "status": "completed",
                "action": {"type": "exec", "command": call[1]}}
        events = [
            {"type": "response.output_item.added", "output_index": 0,
             "item": {**item, "status": "in_progress"}},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ]
    else:
        item_id = api._next_id("fc")
        args = json.dumps(call[1])
        item = {"type": "function_call", "id": item_id, "call_id": api._next_id("call"),
                "name": call[0], "arguments": args, "status": "completed"}
        events = [
            {"type": "response.output_item.added", "output_index": 0,
             "item": {**item, "arguments": "", "status": "in_progress"}},
            {"type": "response.function_call_arguments.delta", "item_id": item_id,
             "output_index": 0, "delta": args},
            {"type": "response.function_call_arguments.done", "item_id": item_id,
             "output_index": 0, "arguments": args},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ]
    final = response("completed", [item])
    if not body.get("stream"):
        return "application/json", json.dumps(final).encode()
    events = [
        {"type": "response.created", "response": response("in_progress", [])},
        {"type": "response.in_progress", "response": response("in_progress", [])},
        *events,
        {"type": "response.completed", "response": final},
    ]
    for seq, event in enumerate(events):
        event["sequence_number"] = seq
    return "text/event-stream", _sse(events)


def chat(api: MockAPI, body: dict[str, Any]) -> tuple[str, bytes]:
    """OpenAI Chat Completions: assistant text, or one tool_calls entry for the shell."""
    call = api._shell_call("/v1/chat/completions", body)
    model = str(body.get("model") or MODEL)
    chat_id = api._next_id("chatcmpl")
    now = int(time.time())
    usage = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    if call is None:
        message: dict[str, Any] = {"role": "assistant", "content": api.reply_text}
        finish = "stop"
    else:
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": api._next_id("call"), "type": "function",
            "function": {"name": call[0], "arguments": json.dumps(call[1])}}]}
        finish = "tool_calls"
    if not body.get("stream"):
        return "application/json", json.dumps({
            "id": chat_id, "object": "chat.completion", "created": now, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }).encode()

    def chunk(delta: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
        return {"id": chat_id, "object": "chat.completion.chunk", "created": now,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    if call is None:
        delta: dict[str, Any] = {"content": api.reply_text}
    else:
        delta = {"tool_calls": [{"index": 0, **message["tool_calls"][0]}]}
    chunks = [chunk({"role": "assistant", "content": ""}, None), chunk(delta, None),
              chunk({}, finish)]
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({"id": chat_id, "object": "chat.completion.chunk", "created": now,
                       "model": model, "choices": [], "usage": usage})
    return "text/event-stream", _sse(chunks, named=False) + b"data: [DONE]\n\n"


def other(path: str) -> dict[str, Any]:
    """Harmless answers to start-up probes (model lists, quotas, settings, feature flags)."""
    bare = path.split("?", 1)[0].rstrip("/")
    if bare.endswith("/count_tokens"):
        return {"input_tokens": 12}
    if bare.endswith("/models"):
        return {
            "object": "list",
            "data": [{"id": MODEL, "object": "model", "type": "model", "created": 0,
                      "owned_by": "mock", "display_name": MODEL}],
            "has_more": False, "first_id": MODEL, "last_id": MODEL,
            "models": [],
        }
    return {}
