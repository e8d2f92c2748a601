"""The mock model API drives the real agent CLIs: a prompt gets the mock's reply, and a
tool turn makes the agent really run a shell command.

Why: later end-to-end tests (hooks, the sandbox shim) rely on this fixture; these tests
prove it works for each installed agent, as root and as an unprivileged user, offline.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from claude_sandbox.tools import agentrun as agents
from claude_sandbox.tools import mockapi

TEST_USER = "sbxuser"
TIMEOUT = 60.0
REPLY = "MOCK-REPLY-7f3a"


@dataclass
class Seat:
    """Who runs the agent, where, and the argv prefix that gets it there."""

    user: str
    uid: int
    home: str
    cwd: str
    prefix: list[str]


def _skip_unless_runnable(agent: str) -> None:
    if not agents.is_installed(agent):
        pytest.skip(f"the real {agent} is not installed at {agents.real_path(agent)} "
                    f"(./install.sh --agents {agent})")


def _seat_prefix(agent: str, user: str) -> list[str]:
    prefix: list[str] = []
    if agent == "claude":
        # Outside the sandbox this project's managed settings block every prompt.
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            pytest.skip("an ungated claude needs root and unshare (private mount namespace)")
        prefix += agents.without_managed_settings_prefix()
    if user != "root":
        prefix += agents.as_user_prefix(user)
    return prefix


@pytest.fixture(params=["root", TEST_USER])
def user(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name == "root" and os.geteuid() != 0:
        pytest.skip("needs root")
    if name != "root":
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            pytest.skip(f"running as {name} needs root and setpriv")
        try:
            pwd.getpwnam(name)
        except KeyError:
            pytest.skip(f"no user {name} (./test.sh creates it)")
    return name


@pytest.fixture
def seat_dir(user: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A fresh base directory owned by USER (for root: tmp_path; pytest's tree is 0700, so
    another user gets its own directory under /tmp, removed afterwards)."""
    if user == "root":
        yield user, tmp_path
        return
    entry = pwd.getpwnam(user)
    base = Path(tempfile.mkdtemp(prefix="e2e-mockapi-"))
    try:
        os.chown(base, entry.pw_uid, entry.pw_gid)
        yield user, base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _seat(agent: str, seat_dir: tuple[str, Path]) -> Seat:
    _skip_unless_runnable(agent)
    user, base = seat_dir
    entry = pwd.getpwnam(user)
    home, cwd = _dirs(base)
    for path in (home, cwd):
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return Seat(user, entry.pw_uid, home, cwd, _seat_prefix(agent, user))


def _run(agent: str, api: mockapi.MockAPI, prompt: str, *, home: str, cwd: str,
         prefix: Sequence[str] = (), **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """run_agent with the real binary behind any prefix; a time-out fails with what the
    mock saw (a hang usually means a settings or auth helper the agent waits on)."""
    try:
        result = agents.run_agent(
            agent, prompt, api=api, home=home, cwd=cwd, argv_prefix=prefix,
            program=agents.real_path(agent) if prefix else None, timeout=TIMEOUT, **kwargs,
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"{agent} still ran after {TIMEOUT:.0f}s\n"
                    + _explain(subprocess.CompletedProcess(
                        expired.cmd, -9, _text(expired.output), _text(expired.stderr)), api))
    assert not agents.stray_processes(f"HOME={home}"), "agent processes outlived the run"
    return result


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def _explain(result: subprocess.CompletedProcess[str], api: mockapi.MockAPI) -> str:
    seen = [(m, p) for m, p, _ in api.requests]
    return (f"status {result.returncode}\nstdout: {result.stdout[-1500:]}\n"
            f"stderr: {result.stderr[-1500:]}\nrequests: {seen}")


def _dirs(base: Path) -> tuple[str, str]:
    home, cwd = base / "home", base / "work"
    home.mkdir()
    cwd.mkdir()
    return str(home), str(cwd)


@pytest.mark.parametrize("agent", agents.AGENTS)
def test_plain_prompt_prints_the_mock_reply(agent: str, seat_dir: tuple[str, Path]) -> None:
    seat = _seat(agent, seat_dir)
    with mockapi.serve(REPLY) as api:
        result = _run(agent, api, "Say hello.", home=seat.home, cwd=seat.cwd,
                      prefix=seat.prefix)
    assert result.returncode == 0, _explain(result, api)
    assert result.stdout.strip() == REPLY, _explain(result, api)
    assert api.model_requests(), _explain(result, api)
    assert not api.tool_result_requests(), _explain(result, api)


@pytest.mark.parametrize("agent", agents.AGENTS)
def test_tool_turn_runs_the_command(agent: str, seat_dir: tuple[str, Path]) -> None:
    seat = _seat(agent, seat_dir)
    marker = Path(seat.cwd, "MARKER")
    with mockapi.serve(REPLY, tool_command=f"touch {marker}") as api:
        result = _run(agent, api, "Create the marker file.", home=seat.home, cwd=seat.cwd,
                      prefix=seat.prefix)
    assert result.returncode == 0, _explain(result, api)
    assert marker.exists(), "the agent did not run the command\n" + _explain(result, api)
    assert marker.stat().st_uid == seat.uid, "the command ran as someone else"
    assert result.stdout.strip() == REPLY, _explain(result, api)
    calls, results = api.tool_call_requests(), api.tool_result_requests()
    assert calls and results, _explain(result, api)
    assert api.requests.index(results[0]) > api.requests.index(calls[0])


@pytest.mark.parametrize("pi_api", ["openai-responses", "anthropic-messages"])
def test_pi_runs_the_command_over_the_other_apis(pi_api: str, tmp_path: Path) -> None:
    """Pi can speak all three APIs; the default run covers Chat Completions."""
    _skip_unless_runnable("pi")
    home, cwd = _dirs(tmp_path)
    marker = Path(cwd, "MARKER")
    with mockapi.serve(REPLY, tool_command=f"touch {marker}") as api:
        result = _run("pi", api, "Create the marker file.", home=home, cwd=cwd, pi_api=pi_api)
    assert result.returncode == 0, _explain(result, api)
    assert marker.exists(), _explain(result, api)
    assert result.stdout.strip() == REPLY, _explain(result, api)
    assert api.tool_result_requests(), _explain(result, api)


def test_gated_claude_never_reaches_the_model(tmp_path: Path) -> None:
    """Without the prefix, this project's prompt gate blocks the prompt before any model
    turn (shows the fixture can tell a hook that fired from one that did not)."""
    _skip_unless_runnable("claude")
    try:
        settings = json.loads(Path(agents.MANAGED_SETTINGS).read_text())
    except (OSError, ValueError):
        pytest.skip(f"no readable {agents.MANAGED_SETTINGS}")
    if "prompt-gate" not in json.dumps(settings.get("hooks", {}).get("UserPromptSubmit")):
        pytest.skip("the managed settings carry no prompt gate")
    home, cwd = _dirs(tmp_path)
    with mockapi.serve(REPLY) as api:
        result = _run("claude", api, "Say hello.", home=home, cwd=cwd)
    said = result.stdout + result.stderr
    assert "blocked" in said and "prompt-gate" in said, _explain(result, api)
    assert REPLY not in result.stdout, _explain(result, api)
    assert not api.model_requests(), _explain(result, api)


# ------------------------------------------------------------------ the mock on its own
def _post(api: mockapi.MockAPI, path: str, body: dict[str, Any]) -> tuple[str, bytes]:
    request = urllib.request.Request(api.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers.get("Content-Type", ""), response.read()


def _sse_events(payload: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in payload.decode().splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def test_mock_answers_each_api_with_text_then_tool_call() -> None:
    """Both shapes of every API, streamed and not, without any agent installed."""
    with mockapi.serve(REPLY, tool_command="true") as api:
        _, body = _post(api, "/v1/messages", {"messages": [], "tools": [{"name": "Bash"}]})
        assert json.loads(body)["content"][0]["input"]["command"] == "true"
        _, body = _post(api, "/v1/messages", {"messages": [], "stream": True})
        deltas = [e["delta"] for e in _sse_events(body) if e["type"] == "content_block_delta"]
        assert deltas == [{"type": "text_delta", "text": REPLY}]

        _, body = _post(api, "/v1/responses", {"input": [], "stream": True,
                                               "tools": [{"type": "function",
                                                          "name": "exec_command"}]})
        events = _sse_events(body)
        assert events[-1]["type"] == "response.completed"
        item = events[-1]["response"]["output"][0]
        assert (item["name"], json.loads(item["arguments"])) == ("exec_command", {"cmd": "true"})
        done = {"input": [{"type": "function_call_output", "call_id": "c", "output": "ok"}]}
        _, body = _post(api, "/v1/responses", done)
        assert json.loads(body)["output"][0]["content"][0]["text"] == REPLY

        tools = [{"type": "function", "function": {"name": "bash"}}]
        _, body = _post(api, "/v1/chat/completions", {"messages": [], "tools": tools})
        call = json.loads(body)["choices"][0]["message"]["tool_calls"][0]["function"]
        assert json.loads(call["arguments"]) == {"command": "true"}
        ctype, body = _post(api, "/v1/chat/completions", {
            "messages": [{"role": "tool", "content": "ok"}], "tools": tools, "stream": True,
            "stream_options": {"include_usage": True}})
        chunks = _sse_events(body)
        assert ctype.startswith("text/event-stream") and body.endswith(b"data: [DONE]\n\n")
        assert chunks[1]["choices"][0]["delta"] == {"content": REPLY}
        assert chunks[-1]["usage"]["total_tokens"] > 0

        _, body = _post(api, "/v1/messages/count_tokens", {"messages": []})
        assert json.loads(body) == {"input_tokens": 12}
        with urllib.request.urlopen(api.url + "/anything?probe=1", timeout=10) as response:
            assert response.status == 200 and json.loads(response.read()) == {}
    assert api.tool_results() == ["ok", "ok"]
    assert len(api.tool_call_requests()) == 3
