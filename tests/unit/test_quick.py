"""launch/quick.py: which questions skip the sandbox, and only for a program root alone
controls; the environment it gets. The real shims run in check 94
(tests/verification/test_verify_integration.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from claude_sandbox.launch import quick


def test_only_the_two_questions_alone_skip_the_sandbox() -> None:
    for args in [(), ("--version", "x"), ("-v",), ("--help", "--version"), ("--Version",),
                 ("-p", "--version"), ("--version=1",)]:
        assert quick.program("claude", args) is None, args


@pytest.mark.parametrize("agent", ["", "../claude", "a/b", ".hidden", "."])
def test_an_odd_agent_name_takes_the_sandbox(agent: str) -> None:
    assert quick.program(agent, ("--version",)) is None


def test_a_program_another_user_could_change_is_not_run(tmp_path: Path) -> None:
    script = tmp_path / "agent"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    # tmp_path's parents include /tmp (sticky, world-writable): never root's alone.
    assert not quick.root_owned(str(script))
    assert quick.root_owned("/bin/sh") == (os.stat("/bin/sh").st_uid == 0)


def test_the_interpreter_a_script_names(tmp_path: Path) -> None:
    cases = {
        b"#!/usr/bin/env node\n": "node",
        b"#!/bin/sh\n": "/bin/sh",
        b"#!/usr/bin/env -S node --x\n": None,
        b"#!relative\n": None,
        b"#!/usr/bin/env ../node\n": None,
        b"#!/usr/bin/env no-such-program-here\n": None,
        b"\x7fELF": "self",
    }
    for head, expected in cases.items():
        program = tmp_path / "p"
        program.write_bytes(head)
        found = quick._interpreter(str(program))
        if expected == "node":
            assert found is not None and found.endswith("/node"), (head, found)
        elif expected == "self":
            assert found == str(program)
        else:
            assert found == expected, (head, found)


def test_the_environment_is_fixed_and_takes_only_a_plain_term() -> None:
    caller = {"TERM": "xterm-256color", "NODE_OPTIONS": "--require x", "LD_PRELOAD": "x.so",
              "HOME": "/home/u", "PATH": "/tmp/bin:/usr/bin", "BUN_OPTIONS": "--preload x"}
    assert quick.environment("/h", "/t", caller) == {
        "PATH": quick.FIXED_PATH, "HOME": "/h", "TMPDIR": "/t", "LANG": "C.UTF-8",
        "TERM": "xterm-256color"}
    for odd in ("", "../../x", "a b", "x" * 80, "vt100;touch"):
        assert "TERM" not in quick.environment("/h", "/t", {"TERM": odd})


def test_a_term_with_letters_beyond_ascii_is_not_passed() -> None:
    assert "TERM" not in quick.environment("/h", "/t", {"TERM": "xt\u00e9rm"})


def test_what_the_program_left_read_only_is_removed_too(tmp_path: Path) -> None:
    """The quick question's HOME is emptied after it, even a directory its program made
    without write permission (jail/dirs.py, remove_dir)."""
    from claude_sandbox.jail import dirs

    private = tmp_path / "private"
    (private / "home" / "locked").mkdir(parents=True)
    (private / "home" / "locked" / "file").write_text("x")
    (private / "home" / "link").symlink_to("/etc")  # not followed
    (private / "home" / "locked").chmod(0o500)
    dirs.remove_dir(str(private))
    assert not private.exists()
