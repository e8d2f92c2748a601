"""The compiled inner stage (inside/enter.c) reads the record as spec.decode reads it, and
does at the standard level what `_enter` in Python does: the same fields in the same
order, the same refusals, the same signals, rlimits and exec.

The differential test runs the real program on records the launcher would write and on
records changed a token at a time: it must refuse (status 64, "malformed") exactly where
spec.decode refuses.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claude_sandbox.core import wire
from claude_sandbox.core.errors import EXIT_UNAVAILABLE, EXIT_USAGE, SandboxError
from claude_sandbox.inside import spec
from claude_sandbox.inside.spec import Inner

SOURCE = (REPO / "claude_sandbox" / "inside" / "enter.c").read_text()


def _c_strings(array: str) -> list[str]:
    found = re.search(rf"{array}\[[A-Z]*\] = \{{(.*?)\}};", SOURCE, re.S)
    assert found, array
    return re.findall(r'"([^"]*)"', found.group(1))


def test_the_program_knows_the_records_fields_and_levels() -> None:
    assert _c_strings("FIELDS") == list(spec.FIELDS)
    assert _c_strings("LEVELS") == list(spec.LEVELS)
    assert re.findall(r'\{"(\w+)", SIG\w+\}', SOURCE) == list(spec.TERMINAL_SIGNALS)


def _run(stage: Path, data: bytes, *,
         preexec: object = None) -> subprocess.CompletedProcess[str]:
    record = os.memfd_create("inner", 0)
    try:
        os.write(record, data)
        os.lseek(record, 0, os.SEEK_SET)
        return subprocess.run([str(stage), str(record)], pass_fds=[record], text=True,
                              capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
                              preexec_fn=preexec)  # type: ignore[arg-type]
    finally:
        os.close(record)


TOKENS = st.sampled_from(["", "0", "1", "7", "65536", "-1", "x", "/bin/true", "standard",
                          "harsh", "brokered", "int", "level", "command", "helper_fd",
                          "99999999", "9" * 20])
PATHS = st.sampled_from(["/usr", "/tmp/a b", "/x\u00e9", "relative"])


@st.composite
def records(draw: st.DrawFn) -> bytes:
    """A record the launcher could write (standard, sometimes another level), then perhaps
    one token replaced, dropped or added, or the bytes cut."""
    level = draw(st.sampled_from(["standard"] * 4 + ["harsh", "brokered"]))
    brokered = level == "brokered"
    inner = Inner(level, draw(st.none() | st.integers(0, 2**40)),
                  draw(st.none() | st.integers(1 << 30, 1 << 40)),
                  tuple(draw(st.lists(PATHS, max_size=2))), (),
                  tuple(draw(st.lists(st.sampled_from(sorted(spec.TERMINAL_SIGNALS)),
                                      max_size=2))),
                  False, ("/bin/true", *draw(st.lists(st.sampled_from(["a", ""]), max_size=2))),
                  shells=("/bin/sh",) if brokered else (),
                  agent_exec=("/bin/true",) if brokered else ())
    tokens = wire.unpack(spec.encode(inner, None), spec.LIMIT)
    change = draw(st.sampled_from(["none", "replace", "drop", "insert", "cut"]))
    at = draw(st.integers(0, len(tokens) - 1))
    if change == "replace":
        tokens[at] = draw(TOKENS)
    elif change == "drop":
        del tokens[at]
    elif change == "insert":
        tokens.insert(at, draw(TOKENS))
    data = wire.pack(tokens)
    if change == "cut":
        data = data[:draw(st.integers(0, len(data) - 1))]
    return data


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_the_program_refuses_exactly_what_spec_refuses(enter_stage: Path, data: bytes) -> None:
    try:
        inner, _ = spec.decode(data)
    except SandboxError as error:
        assert error.status == EXIT_USAGE
        done = _run(enter_stage, data)
        assert done.returncode == EXIT_USAGE, (data, done.stderr)
        assert "_enter: the launcher's plan is malformed" in done.stderr, (data, done.stderr)
        return
    done = _run(enter_stage, data)
    assert "malformed" not in done.stderr, (data, done.stderr)
    if inner.level != "standard":
        assert done.returncode == EXIT_USAGE
        assert f"runs hardening = standard only, not {inner.level}" in done.stderr
    else:
        # /bin/true ran, or could not be run (69); under a data cap of a few bytes a changed
        # record may ask for, the kernel's exec itself kills it (SIGSEGV): that is the cap.
        tiny = inner.max_memory is not None and inner.max_memory < 1 << 20
        assert done.returncode in (0, EXIT_UNAVAILABLE) or tiny, (data, done.stderr)


def _standard(command: tuple[str, ...], **fields: object) -> bytes:
    return spec.encode(Inner("standard", command=command, **fields), None)  # type: ignore[arg-type]


def test_the_program_sets_what_enter_sets(enter_stage: Path) -> None:
    """rlimits soft = hard, no core files, SIGPIPE back to default, and a terminal signal
    the launch inherited ignored kept ignored (keep_ignored), the others given back."""
    script = ("ulimit -c; ulimit -Hc; ulimit -u; ulimit -Hu; "
              "grep SigIgn /proc/self/status")
    data = _standard(("/bin/bash", "-c", script), max_pids=4000, keep_ignored=("quit",))

    def ignore() -> None:
        for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_IGN)

    done = _run(enter_stage, data, preexec=ignore)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[:4] == ["0", "0", "4000", "4000"], done.stdout
    ignored = int(lines[-1], 16)
    assert ignored & (1 << (signal.SIGQUIT - 1))
    assert not ignored & (1 << (signal.SIGINT - 1))
    assert not ignored & (1 << (signal.SIGPIPE - 1))


def test_the_program_says_why_it_cannot_run(enter_stage: Path) -> None:
    done = _run(enter_stage, _standard(("/nonexistent/agent",)))
    assert (done.returncode, done.stderr) == (
        EXIT_UNAVAILABLE, "claude-sandbox: cannot run /nonexistent/agent: "
                          "No such file or directory\n")
    usage = subprocess.run([str(enter_stage)], capture_output=True, text=True, check=False)
    assert usage.returncode == EXIT_USAGE
    assert usage.stderr == "claude-sandbox: _enter: expected one argument, the plan's descriptor\n"


def test_a_helper_that_is_gone_refuses(enter_stage: Path) -> None:
    """late_masks with a helper that answers nothing: no agent runs with the outer
    processes shown (prochide.py's refusal, the same words)."""
    ours, theirs = socket.socketpair()
    ours.close()
    record = os.memfd_create("inner", 0)
    data = spec.encode(Inner("standard", late_masks=True, command=("/bin/true",)),
                       theirs.fileno())
    os.write(record, data)
    os.lseek(record, 0, os.SEEK_SET)
    try:
        done = subprocess.run([str(enter_stage), str(record)], capture_output=True, text=True,
                              pass_fds=[record, theirs.fileno()], check=False)
    finally:
        os.close(record)
        theirs.close()
    assert done.returncode == EXIT_UNAVAILABLE
    assert done.stderr.startswith("claude-sandbox: _enter: the late masks could not be made: "
                                  ), done.stderr


@pytest.fixture(scope="module")
def enter_stage(package_copy: Path) -> Path:
    return package_copy / "enter"
