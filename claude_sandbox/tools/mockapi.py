"""A local mock of the model APIs that Claude Code, Codex and Pi talk to.

Why: end-to-end tests must drive the real agent CLIs without the internet and still decide
what the "model" does, e.g. make the agent run one shell command through its own tool so a
test can see whether a planted hook or a sandbox rule fired.

Spoken (just enough for the three agents installed here; every other path gets a harmless
200 JSON answer so no client start-up probe hangs):

- Anthropic Messages: ``POST /v1/messages`` streamed (SSE) or not, and
  ``POST /v1/messages/count_tokens``. Claude Code, and Pi with ``api: anthropic-messages``.
- OpenAI Responses: ``POST /v1/responses`` streamed or not. Codex (its only wire API now),
  and Pi with ``api: openai-responses``.
- OpenAI Chat Completions: ``POST /v1/chat/completions`` streamed or not. Pi with
  ``api: openai-completions``.

Turns are decided from each request alone, not from a counter, because the agents make side
requests (titles, quota probes, summaries) in between: a request that offers the shell tool
and carries no tool result yet is answered with a call of that tool for ``tool_command``;
every other request (side requests, the turn after the tool result, or every request when
``tool_command`` is None) is answered with ``reply_text``.
"""

from __future__ import annotations

import gzip
import itertools
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "mock-model"
# Seconds a client may take to send its request or read the answer before we drop it.
SOCKET_TIMEOUT = 15.0

# Shell tools by name: how each agent's tool takes the command. Claude Code: "Bash";
# Pi: "bash"; Codex offers one of "shell_command" / "exec_command" / "shell" depending on
# the model family and version, or the hosted "local_shell" tool type.
_SHELL_ARGS: dict[str, Callable[[str], Any]] = {
    "Bash": lambda cmd: {"command": cmd, "description": "Run the command the test asked for"},
    "bash": lambda cmd: {"command": cmd},
    "shell_command": lambda cmd: {"command": cmd},
    "exec_command": lambda cmd: {"cmd": cmd},
    "shell": lambda cmd: {"command": ["bash", "-lc", cmd]},
}
# File tools by name, for a turn that writes a file with the agent's own tool rather
# than a command: Claude Code's "Write", pi's "write".
_WRITE_ARGS: dict[str, Callable[[str, str], Any]] = {
    "Write": lambda path, text: {"file_path": path, "content": text},
    "write": lambda path, text: {"path": path, "content": text},
}
_TOOL_OUTPUT_ITEMS = {
    "function_call_output",
    "custom_tool_call_output",
    "local_shell_call_output",
}

Request = tuple[str, str, Any]


class MockAPI:
    """The running mock: where it listens (``url``, ``port``) and every request it saw, in
    order, in ``requests``: (method, path with query, body parsed as JSON, else the raw
    text, else None)."""

    def __init__(self, reply_text: str, tool_command: str | None,
                 tool_write: tuple[str, str] | None = None) -> None:
        self.reply_text = reply_text
        self.tool_command = tool_command
        self.tool_write = tool_write  # (path, content): the agent's own file tool instead
        self.host = "127.0.0.1"
        self.port = 0
        self.requests: list[Request] = []
        self.keys: list[str] = []  # each request's x-api-key or Authorization, as received
        self.scheme = "http"
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    # ------------------------------------------------------------------ for assertions
    def model_requests(self) -> list[Request]:
        """The requests that asked the model for a turn (any of the three APIs)."""
        with self._lock:
            seen = list(self.requests)
        return [r for r in seen if r[0] == "POST" and _api_of(r[1]) is not None]

    def tool_call_requests(self) -> list[Request]:
        """Model requests that the mock answered with a call of the shell tool."""
        return [r for r in self.model_requests() if self._shell_call(r[1], r[2]) is not None]

    def tool_result_requests(self) -> list[Request]:
        """Model requests that carry a tool result back (the turn after the command ran)."""
        return [r for r in self.model_requests() if _has_tool_result(r[1], r[2])]

    def tool_results(self) -> list[str]:
        """The text of every tool result the agents sent back, flattened to strings."""
        out: list[str] = []
        for _method, path, body in self.tool_result_requests():
            out.extend(_tool_result_texts(path, body))
        return out

    # ------------------------------------------------------------------ internals
    def _record(self, method: str, path: str, body: Any) -> None:
        with self._lock:
            self.requests.append((method, path, body))

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}_mock{next(self._ids):04d}"

    def _shell_call(self, path: str, body: Any) -> tuple[str, Any] | None:
        """(tool name, arguments) the model should call now, or None for a text reply."""
        if (self.tool_command is None and self.tool_write is None) or not isinstance(body, dict):
            return None
        api = _api_of(path)
        if api is None or _has_tool_result(path, body):
            return None
        names = _tool_names(api, body)
        if self.tool_write is not None:
            for name, make_write in _WRITE_ARGS.items():
                if name in names:
                    return name, make_write(*self.tool_write)
            return None
        if self.tool_command is None:
            return None
        if api == "responses" and "local_shell" in names and not (names & _SHELL_ARGS.keys()):
            return "local_shell", ["bash", "-lc", self.tool_command]
        for name, make_args in _SHELL_ARGS.items():
            if name in names:
                return name, make_args(self.tool_command)
        return None


# ---------------------------------------------------------------------- request inspection
def _api_of(path: str) -> str | None:
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/chat/completions"):
        return "chat"
    return None


def _tool_names(api: str, body: dict[str, Any]) -> set[str]:
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


def _has_tool_result(path: str, body: Any) -> bool:
    """Whether the history sent back holds a tool result (one entry per result)."""
    return bool(_tool_result_texts(path, body))


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


def _tool_result_texts(path: str, body: Any) -> list[str]:
    if not isinstance(body, dict):
        return []
    api = _api_of(path)
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


# ---------------------------------------------------------------------- answers
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


def _anthropic(api: MockAPI, body: dict[str, Any]) -> tuple[str, bytes]:
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


def _responses(api: MockAPI, body: dict[str, Any]) -> tuple[str, bytes]:
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


def _chat(api: MockAPI, body: dict[str, Any]) -> tuple[str, bytes]:
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


def _other(path: str) -> dict[str, Any]:
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


# ---------------------------------------------------------------------- server
class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest output should show test failures, not access logs."""

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
            raw = bytes(data)
        else:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        encoding = self.headers.get("Content-Encoding", "").lower()
        if encoding == "gzip":
            raw = gzip.decompress(raw)
        elif encoding == "deflate":
            raw = zlib.decompress(raw)
        return raw

    def _send(self, status: int, ctype: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-cache")
        self.send_header("request-id", "req_mock")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        self.wfile.flush()

    def _handle(self) -> None:
        api = self.server.api
        raw = self._body() if self.command not in ("GET", "HEAD") else b""
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        api._record(self.command, self.path, body)
        with api._lock:
            api.keys.append(self.headers.get("x-api-key") or self.headers.get("Authorization")
                            or "")
        kind = _api_of(self.path)
        try:
            if self.command == "POST" and kind is not None and isinstance(body, dict):
                answer = {"anthropic": _anthropic, "responses": _responses, "chat": _chat}[kind]
                ctype, payload = answer(api, body)
            else:
                ctype, payload = "application/json", json.dumps(_other(self.path)).encode()
        except Exception as error:  # a bug here must reach the test as an answer, not a hang
            fault = {"type": "error", "error": {"type": "api_error", "message": repr(error)}}
            self._send(500, "application/json", json.dumps(fault).encode())
            return
        self._send(200, ctype, payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], api: MockAPI, bind: bool = True) -> None:
        self.api = api
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(addr, _Handler, bind_and_activate=bind)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """End kept-alive connections, so no handler thread outlives the mock."""
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@contextmanager
def serve(
    reply_text: str = "MOCK-REPLY",
    tool_command: str | None = None,
    *,
    tool_write: tuple[str, str] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    listener: socket.socket | None = None,
    name: str | None = None,
    tls: tuple[str, str] | None = None,
) -> Iterator[MockAPI]:
    """Run the mock in a background thread for the duration of the block (port 0: a free one).

    `listener`: a bound, listening socket to serve instead (one made in another network
    namespace); `name`: the host name its url says, instead of the address; `tls`: a
    certificate and its key, to serve HTTPS."""
    api = MockAPI(reply_text, tool_command, tool_write)
    if listener is None:
        server = _Server((host, port), api)
    else:
        server = _Server(listener.getsockname()[:2], api, bind=False)
        server.socket.close()
        server.socket = listener
    api.host, api.port = name or host, server.server_address[1]
    if tls is not None:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        api.scheme = "https"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              name=f"mockapi:{api.port}", daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.close_connections()
        server.server_close()
        thread.join(timeout=5)

