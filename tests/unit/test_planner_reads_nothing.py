"""The planner reads nothing of the host: every fact it uses comes from the facts stage.

The facts are gathered for real on this host (each agent, each hardening level this
user may launch); then the plan is made and rendered (bwrap's command line, the inner
record, the seccomp program, `explain` as text and JSON, the digest) with every way to
reach the host replaced by one that fails the test.
"""

from __future__ import annotations

import builtins
import io
import os
import pwd
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from claude_sandbox.core.record import replace
from claude_sandbox.inside import spec
from claude_sandbox.launch import decide
from claude_sandbox.launch.configure.request import Request
from claude_sandbox.launch.facts import gather, hostfacts
from claude_sandbox.launch.planner import plan, render, seccomp
from claude_sandbox.launch.session import state

# Each way a function could read the host: files, directories, links, the password
# database, processes, sockets.
_HOST = [(os, name) for name in ("stat", "lstat", "open", "listdir", "scandir", "readlink",
                                 "access", "getcwd", "getuid", "geteuid", "getgid",
                                 "fork", "posix_spawn", "execv", "execve", "uname")]
_HOST += [(builtins, "open"), (io, "open"), (pwd, "getpwuid"), (pwd, "getpwnam"),
          (subprocess, "Popen"), (socket, "socket")]


def _refuse(name: str, reached: list[str]) -> Callable[..., object]:
    def refused(*args: object, **kwargs: object) -> object:
        reached.append(f"{name}{args[:1]}")
        raise AssertionError(f"the planner read the host: {name}{args[:1]}")
    return refused


def _levels() -> tuple[str, ...]:
    # brokered refuses root before anything is read; a user may launch it.
    return ("standard", "harsh") if os.getuid() == 0 else ("standard", "harsh", "brokered")


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_making_and_rendering_a_plan_reads_nothing_of_the_host(
        agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    monkeypatch.chdir(workspace)
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "xterm"}
    configured = decide.configure(agent, environ)
    for level in _levels():
        cfg = replace(configured.cfg, hardening=level)
        store = state.store_root(cfg.state_dir, hostfacts.login_home(), os.getuid())
        gathered = gather.gather(configured.profile, cfg,
                                 Request(agent=agent, command=None, args=()), environ, (),
                                 store)
        reached: list[str] = []  # a caught AssertionError is still on record here

        with monkeypatch.context() as guarded:
            for module, name in _HOST:
                guarded.setattr(module, name, _refuse(f"{module.__name__}.{name}", reached))
            made = plan.make(configured.profile, cfg, gathered, configured.limit_plan)
            render.bwrap_argv(made, "/usr/bin/bwrap", {name: "9" for name in
                                                       render.named_fds(made)})
            spec.encode(made.inner, 7)
            seccomp.build_filter(made.inner.level, "x86_64", made.seccomp_flags)
            render.explain_lines(made)
            render.explain_json(made)
            render.digest(made)
        assert not reached, (level, reached)
        assert made.inner.level == level
