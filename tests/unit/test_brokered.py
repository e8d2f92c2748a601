"""The launcher's half of hardening = brokered: pure parts (launch/planner/brokered.py), and the
command server's request parser (inside/broker.py), fuzzed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.core import paths
from claude_sandbox.core.errors import SandboxError
from claude_sandbox.inside import broker
from claude_sandbox.launch.planner import brokered
from claude_sandbox.launch.planner.mounts import Mount, Writable


def test_connect_ports_come_from_urls_and_local_ports() -> None:
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080/v1",
           "HTTPS_PROXY": "https://user:secret@proxy.example:3128",
           "NO_PROXY": "localhost,wss://h", "IPV6": "http://[::1]:9000/x",
           "PLAIN": "127.0.0.1:22 no scheme", "BAD": "http://h:99999/ http://h:x/"}
    assert brokered.connect_ports(list(env.values()), (5432,)) == (80, 443, 3128, 5432, 8080,
                                                                   9000)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.text(max_size=60), max_size=5))
def test_connect_ports_are_always_tcp_ports(env: dict[str, str]) -> None:
    found = brokered.connect_ports(list(env.values()), ())
    assert 443 in found and all(0 < port < 65536 for port in found)


@pytest.mark.parametrize(("program", "package"), [
    ("/a/node_modules/@openai/codex/bin/codex.js", "/a/node_modules/@openai/codex"),
    ("/a/node_modules/pi/dist/cli.js", "/a/node_modules/pi"),
    ("/usr/bin/python3.11", "/usr/bin/python3.11"),
    ("/a/node_modules/@scope", "/a/node_modules/@scope"),
])
def test_the_npm_package_of_a_program(program: str, package: str) -> None:
    assert brokered._npm_package(program) == package


def _fields(uid: int = 1000, workspace: str = "/w") -> dict[str, tuple[object, ...]]:
    runners = brokered.Runners(("/usr/bin/bash", "/usr/bin/dash"),
                               ("/usr/bin/node", "/home/u/.local/bin/rg", f"{workspace}/tool"))
    mounts = (Mount("tmpfs", "/tmp", ""), Mount("bind", "/home/u", ""),
              Mount("bind", workspace, ""), Mount("bind", f"{workspace}/.git", ""),
              Mount("ro-bind", "/usr", ""), brokered.MOUNT)
    return brokered.fields(runners, Writable(workspace, ("/data",)), mounts, uid,
                           {"X": "https://api:8443"}, ("/n", "-c", "base_url=\"http://h:81\"",
                            "a prompt naming http://h:82/"), (),
                           (1455,))


def test_the_agent_writes_neither_the_workspace_nor_the_servers_directory() -> None:
    found = _fields()
    assert found["commands_only"] == ("/w", "/data")
    assert found["agent_writable"] == ("/tmp", "/home/u", "/dev")
    assert paths.BROKER_DIR not in found["agent_writable"]
    # A tool found where the agent or its commands write (the state store, the
    # workspace) never runs: only what comes from read-only places.
    assert found["agent_exec"] == (paths.COMMAND_CLIENT, "/usr/bin/node")
    assert found["agent_connect"] == (81, 443, 8443) and found["agent_bind"] == (1455,)


def test_a_root_launch_is_refused() -> None:
    with pytest.raises(SandboxError, match="does not run as root"):
        _fields(uid=0)


def _request(executed: str, cwd: str, argv: list[str], env: list[str]) -> bytes:
    fields = ["1", executed, cwd, str(len(argv)), *argv, *env]
    return b"".join(f.encode() + b"\0" for f in fields)


def test_a_request_reads_back() -> None:
    data = _request("/bin/sh", "/w", ["sh", "-c", "echo hi"], ["A=1", "B=x=y", "junk"])
    assert broker.parse(data) == ("/bin/sh", "/w", ["sh", "-c", "echo hi"],
                                  {"A": "1", "B": "x=y"})


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_a_request_or_refused(data: bytes) -> None:
    parsed = broker.parse(data)
    if parsed is not None:
        _executed, _cwd, argv, env = parsed
        assert argv and isinstance(env, dict)
