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
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from claude_sandbox.tools.mockwire import (
    SHELL_ARGS,
    WRITE_ARGS,
    anthropic,
    api_of,
    chat,
    has_tool_result,
    other,
    responses,
    tool_names,
    tool_result_texts,
)

# Seconds a client may take to send its request or read the answer before we drop it.
SOCKET_TIMEOUT = 15.0
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
        return [r for r in seen if r[0] == "POST" and api_of(r[1]) is not None]

    def tool_call_requests(self) -> list[Request]:
        """Model requests that the mock answered with a call of the shell tool."""
        return [r for r in self.model_requests() if self._shell_call(r[1], r[2]) is not None]

    def tool_result_requests(self) -> list[Request]:
        """Model requests that carry a tool result back (the turn after the command ran)."""
        return [r for r in self.model_requests() if has_tool_result(r[1], r[2])]

    def tool_results(self) -> list[str]:
        """The text of every tool result the agents sent back, flattened to strings."""
        out: list[str] = []
        for _method, path, body in self.tool_result_requests():
            out.extend(tool_result_texts(path, body))
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
        api = api_of(path)
        if api is None or has_tool_result(path, body):
            return None
        names = tool_names(api, body)
        if self.tool_write is not None:
            for name, make_write in WRITE_ARGS.items():
                if name in names:
                    return name, make_write(*self.tool_write)
            return None
        if self.tool_command is None:
            return None
        if api == "responses" and "local_shell" in names and not (names & SHELL_ARGS.keys()):
            return "local_shell", ["bash", "-lc", self.tool_command]
        for name, make_args in SHELL_ARGS.items():
            if name in names:
                return name, make_args(self.tool_command)
        return None


# ---------------------------------------------------------------------- request inspection


# ---------------------------------------------------------------------- answers


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
        kind = api_of(self.path)
        try:
            if self.command == "POST" and kind is not None and isinstance(body, dict):
                answer = {"anthropic": anthropic, "responses": responses, "chat": chat}[kind]
                ctype, payload = answer(api, body)
            else:
                ctype, payload = "application/json", json.dumps(other(self.path)).encode()
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

