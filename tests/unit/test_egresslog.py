"""`claude-sandbox log`: picking a session, the text and JSON forms, and names that
must not reach the terminal raw.

Records are written the way the proxy writes them (egressrecord.line) into a
directory under tmp_path; `run` is pointed at it through the state-dir it reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from claude_sandbox.core.errors import EXIT_USAGE, SandboxError
from claude_sandbox.jail import egressrecord
from claude_sandbox.launch.configure import config
from claude_sandbox.launch.session import egresslog, state

REPO = Path(__file__).resolve().parents[2]
WORKSPACE = "/workspaces/project"
HOSTILE = "\x1b[2Jevil"


def session(sid: str, agent: str = "claude", policy: str = "allow-list") -> dict[str, Any]:
    return {"kind": "session", "session": sid, "agent": agent, "policy": policy,
            "workspace": WORKSPACE, "time": "2025-03-01T10:00:00Z"}


def connection(name: str | None, port: int = 443, verdict: str = "allowed",
               kind: str = "tls", **more: Any) -> dict[str, Any]:
    refused = verdict == "refused"
    entry = {"kind": kind, "time": "2025-03-01T10:00:05Z", "name": name, "port": port,
             "address": "203.0.113.7", "upstream": None if refused else "203.0.113.7",
             "verdict": verdict, "rule": f"{name} is not on the allow-list" if refused
             else f"allow-domain = {name}", "fix": f"allow-domain = {name}" if refused else "",
             "sent": 0 if refused else 1536, "received": 0 if refused else 3 << 20,
             "seconds": 0.5}
    entry.update(more)
    return entry


def write(where: Path, sid: str, entries: list[dict[str, Any]], cut_short: bool = False
          ) -> None:
    where.mkdir(parents=True, exist_ok=True)
    data = b"".join(egressrecord.line(e) for e in entries)
    (where / f"{sid}{egressrecord.SUFFIX}").write_bytes(data + (b'{"kind": "tl' if cut_short
                                                                else b""))


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state-dir in tmp_path, and a workspace-root of a directory that exists."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # run reads these two keys alone; the rest of the configuration is not its business.
    cfg = SimpleNamespace(state_dir=str(tmp_path / "state"), workspace_root=str(workspace))
    monkeypatch.setattr(config, "load", lambda agent, environ: cfg)
    root = state.store_root(str(tmp_path / "state"), "/nonexistent", os.getuid())
    return Path(egressrecord.directory(root, os.path.realpath(workspace)))


def show(capsys: pytest.CaptureFixture[str], *, session: str | None = None,
         agent: str | None = None, as_json: bool = False, listing: bool = False) -> str:
    assert egresslog.run(session, agent=agent, as_json=as_json, listing=listing,
                         environ={}) == 0
    return capsys.readouterr().out


def test_the_newest_session_is_shown_with_each_entry_and_its_fix(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(store, "20250301T090000Z-1", [session("20250301T090000Z-1"),
                                        connection("old.example")])
    write(store, "20250301T100000Z-2", [
        session("20250301T100000Z-2"), connection("api.anthropic.com"),
        connection("evil.example", verdict="refused"),
        connection("db.example", port=5432, kind="tcp", verdict="refused",
                   fix="allow-domain = db.example:5432"),
        {"kind": "dns", "time": "2025-03-01T10:00:06Z", "name": "leak.example", "port": 53,
         "address": None, "upstream": None, "verdict": "refused", "rule": "not listed",
         "fix": "allow-domain = leak.example", "sent": 40, "received": 0, "seconds": 0},
    ], cut_short=True)
    out = show(capsys).splitlines()
    assert out[0].startswith("session 20250301T100000Z-2  agent claude  policy allow-list  "
                             f"workspace {WORKSPACE}  started 2025-03-01T10:00:00Z")
    assert out[1].split() == ["time", "kind", "verdict", "to", "upstream", "sent",
                              "received", "rule"]
    assert out[2].split()[:7] == ["10:00:05", "tls", "allowed", "api.anthropic.com:443",
                                  "203.0.113.7", "1.5K", "3.0M"]
    assert out[3].split()[:4] == ["10:00:05", "tls", "refused", "evil.example:443"]
    assert out[4] == "    allow with: allow-domain = evil.example"
    assert "db.example:5432" in out[5] and out[6].endswith("allow-domain = db.example:5432")
    assert out[7].split()[:4] == ["10:00:06", "dns", "refused", "leak.example"]
    told = egressrecord.summary(egressrecord.read(str(store / "20250301T100000Z-2.jsonl")))
    assert told and out[-1] == "egress: 3 connections or queries refused (evil.example:443, " \
        "db.example:5432, leak.example)" and told.startswith(out[-1] + "; ")
    assert "old.example" not in "\n".join(out)
    assert "lines that would allow" not in "\n".join(out)  # not a learn session


def test_a_session_is_picked_by_id_and_an_unknown_id_names_the_newest_ten(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = [f"20250301T1000{n:02d}Z-{n}" for n in range(12)]
    for sid in ids:
        write(store, sid, [session(sid), connection(f"host{sid[-2:]}.example")])
    assert show(capsys, session=ids[0]).startswith(f"session {ids[0]} ")
    with pytest.raises(SandboxError) as caught:
        egresslog.run("nope", agent=None, as_json=False, listing=False, environ={})
    assert caught.value.status == EXIT_USAGE
    assert "no session nope" in caught.value.message
    assert "the newest 10: " + ", ".join(ids[2:]) in caught.value.message
    assert ids[1] not in caught.value.message


def test_no_record_is_one_line_and_status_one(store: Path) -> None:
    with pytest.raises(SandboxError) as caught:
        egresslog.run(None, agent=None, as_json=False, listing=False, environ={})
    assert caught.value.status == egresslog.EXIT_NONE == 1
    assert caught.value.message.startswith("no egress record for ")
    assert caught.value.message.endswith("(no jailed session has run here)")
    assert "\n" not in caught.value.message


def test_agent_chooses_only_that_agents_sessions(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(store, "20250301T100000Z-1", [session("20250301T100000Z-1", agent="codex")])
    write(store, "20250301T110000Z-2", [session("20250301T110000Z-2", agent="claude")])
    assert show(capsys, agent="codex").startswith("session 20250301T100000Z-1 ")
    with pytest.raises(SandboxError) as caught:
        egresslog.run(None, agent="pi", as_json=False, listing=False, environ={})
    assert caught.value.message.startswith("no egress record of pi for ")
    with pytest.raises(SandboxError):
        egresslog.run(None, agent="nobody", as_json=False, listing=False, environ={})


def test_hostile_names_never_reach_the_terminal_raw(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sid = "20250301T100000Z-1"
    write(store, sid, [session(sid, policy="learn"), connection(HOSTILE, verdict="refused"),
                       connection("\u202eexample.com\u0430", verdict="refused"),
                       connection("a\\x1b.example")])
    out = show(capsys)
    assert all(c == "\n" or " " <= c <= "~" for c in out)
    assert "\\x1b[2Jevil:443" in out
    assert "allow with: allow-domain = \\x1b[2Jevil" in out
    assert "\\u202eexample.com\\u0430" in out
    assert "a\\\\x1b.example" in out  # a literal backslash is not taken for an escape
    learned = out[out.index("lines that would allow this session:"):].splitlines()[1:]
    assert learned == ["  (none: no connection was made)"]  # no host name among them
    listed = show(capsys, listing=True)
    assert "\x1b" not in listed
    document = show(capsys, as_json=True)
    assert "\x1b" not in document and json.loads(document)["entries"][0]["name"] == HOSTILE


def test_json_is_the_header_and_every_other_line(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sid = "20250301T100000Z-1"
    entries = [session(sid), connection("api.anthropic.com"),
               {"kind": "cut", "time": "2025-03-01T10:01:00Z", "why": "size limit"}]
    write(store, sid, entries)
    assert json.loads(show(capsys, as_json=True)) == {"session": entries[0],
                                                     "entries": entries[1:]}
    text = show(capsys)
    assert "size limit" in text


def test_a_learn_session_ends_with_the_lines_that_would_allow_it(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sid = "20250301T100000Z-1"
    write(store, sid, [session(sid, policy="learn"), connection("api.anthropic.com"),
                       connection("api.anthropic.com"),
                       connection("db.example", port=5432, kind="tcp"),
                       connection(None, kind="tcp", port=22)])
    out = show(capsys).splitlines()
    at = out.index("lines that would allow this session:")
    assert out[at + 1:] == ["  allow-domain = api.anthropic.com",
                            "  allow-domain = db.example:5432", "  allow-ip = 203.0.113.7"]
    assert out[at - 1] == "egress: nothing was refused"
    assert any("203.0.113.7:22" in line for line in out)  # no name: the address


def test_list_counts_entries_and_refusals_newest_last(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(store, "20250301T110000Z-2", [session("20250301T110000Z-2", agent="codex",
                                                policy="learn"), connection("a.example")])
    write(store, "20250301T100000Z-1", [session("20250301T100000Z-1"), connection("a.example"),
                                        connection("b.example", verdict="refused")])
    rows = [line.split() for line in show(capsys, listing=True).splitlines()]
    assert rows == [["session", "agent", "policy", "entries", "refused"],
                    ["20250301T100000Z-1", "claude", "allow-list", "2", "1"],
                    ["20250301T110000Z-2", "codex", "learn", "1", "0"]]
    listed = json.loads(show(capsys, listing=True, as_json=True))
    assert [row["session"] for row in listed] == ["20250301T100000Z-1", "20250301T110000Z-2"]
    assert listed[0]["refused"] == 1


def test_a_session_past_midnight_says_where_the_day_changes() -> None:
    late = connection("a.example", time="2025-03-02T00:00:01Z")
    lines = egresslog.text_lines("x", [session("x"), connection("a.example"), late])
    assert lines[3] == "-- 2025-03-02" and lines[4].startswith("00:00:01  tls ")
    assert lines[2].startswith("10:00:05  tls ")


def test_a_record_without_its_first_line_still_shows() -> None:
    lines = egresslog.text_lines("20250301T100000Z-1", [connection("a.example")])
    assert lines[0].startswith("session 20250301T100000Z-1  agent ?  policy ?")
    assert egresslog.text_lines("x", [session("x")])[2] == "(no connection and no query)"


def test_help_names_every_option() -> None:
    done = subprocess.run([sys.executable, "-m", "claude_sandbox", "log", "--help"],
                          cwd=REPO, capture_output=True, text=True, check=True)
    for option in ("--session ID", "--agent NAME", "--json", "--list"):
        assert option in done.stdout
    assert "cannot write" in done.stdout and "egress/WORKSPACE-KEY" in done.stdout
    top = subprocess.run([sys.executable, "-m", "claude_sandbox", "--help"], cwd=REPO,
                         capture_output=True, text=True, check=True)
    assert "\n    log " in top.stdout


def test_a_brokered_connection_says_what_the_broker_did() -> None:
    entries = [{"kind": "session", "session": "s", "agent": "claude", "policy": "allow-list",
                "time": "2026-12-02T10:00:00Z"},
               {"kind": "tls", "time": "2026-12-02T10:00:01Z", "name": "api.github.com",
                "port": 443, "verdict": "allowed", "rule": "api.github.com", "sent": 10,
                "received": 20, "terminated": True, "injected": 2},
               {"kind": "http", "time": "2026-12-02T10:00:02Z", "name": "x.test", "port": 80,
                "verdict": "allowed", "rule": "x.test", "other_sentinels": 1}]
    text = "\n".join(egresslog.text_lines("s", entries))
    assert "brokered: 2 credential(s) put back" in text
    assert "1 sentinel(s) sent here unreplaced" in text


def _records(where: Path, count: int, size: int = 10, pid: int = 999_999_999) -> list[Path]:
    made = []
    for i in range(count):
        path = where / f"20261206T{i:06d}Z-{pid}{egressrecord.SUFFIX}"
        path.write_bytes(b"x" * size)
        made.append(path)
    return made


def test_a_workspace_keeps_its_newest_records(tmp_path: Path) -> None:
    made = _records(tmp_path, egressrecord.KEEP_SESSIONS + 5)
    removed = egressrecord.prune(str(tmp_path), str(made[-1]))
    assert removed == 5
    assert sorted(tmp_path.iterdir()) == made[5:]


def test_the_bytes_are_bounded_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(egressrecord, "KEEP_BYTES", 25)
    made = _records(tmp_path, 4)
    egressrecord.prune(str(tmp_path), str(made[-1]))
    assert sorted(tmp_path.iterdir()) == made[2:]


def test_the_current_record_and_a_running_one_are_never_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(egressrecord, "KEEP_SESSIONS", 1)
    running = _records(tmp_path, 1, pid=os.getpid())[0]  # the oldest, its launcher alive
    current = tmp_path / f"20250101T000000Z-1{egressrecord.SUFFIX}"  # older still
    current.write_bytes(b"x")
    newest = _records(tmp_path, 3)[-1]
    (tmp_path / f"20261206T999999Z-2{egressrecord.SUFFIX}").symlink_to(newest)  # not ours
    egressrecord.prune(str(tmp_path), str(current))
    assert {p.name for p in tmp_path.iterdir()} == {
        running.name, current.name, newest.name, f"20261206T999999Z-2{egressrecord.SUFFIX}"}


def test_a_record_whose_session_holds_it_is_kept_whatever_its_pid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session in another pid namespace (another container sharing the home) names a
    pid this one cannot see: its lock, held through the launcher's and the proxy's
    descriptors, keeps its record; the same record once they close is removed."""
    monkeypatch.setattr(egressrecord, "KEEP_SESSIONS", 1)
    path, fd = egressrecord.create(str(tmp_path), {"session": "20260101T000000Z-999999999"})
    proxy = os.dup(fd)  # the proxy's copy: the same open file
    os.close(fd)  # the launcher's gone first; the proxy still writes
    newest = _records(tmp_path, 2)[-1]
    egressrecord.prune(str(tmp_path), str(newest))
    assert os.path.exists(path)
    os.close(proxy)
    egressrecord.prune(str(tmp_path), str(newest))
    assert not os.path.exists(path)
