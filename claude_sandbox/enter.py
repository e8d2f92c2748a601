"""`_enter`: the last step inside bwrap, between the sandbox and the agent.

bwrap execs `INTERPRETER -I -m claude_sandbox _enter ARGS -- AGENT_ARGV...`.
This module then sets the in-sandbox rlimits, enters the Landlock domain
(it must be entered inside bwrap: a process in a domain cannot run bwrap),
and execs the agent. The seccomp filter is already in force (bwrap loaded it
before exec), and everything here is inherited by the agent and every
descendant, none of it removable.

It runs at every launch, so it imports little: `landlock` (ctypes) and
`resource`; `limits` is not imported here.
"""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass
from typing import NoReturn

from . import landlock
from .errors import EXIT_UNAVAILABLE, EXIT_USAGE, SandboxError

LEVELS = ("standard", "harsh")


@dataclass(frozen=True, slots=True)
class KernelSettings:
    """What `_enter` applies inside the sandbox.

    `max_pids` / `max_memory` are the caps left to rlimits: None where a
    cgroup outside already enforces the cap (limits.plan_limits decides), or
    where the cap is off.
    """

    level: str = "standard"
    max_pids: int | None = None  # RLIMIT_NPROC, counted in the sandbox's user namespace
    max_memory: int | None = None  # RLIMIT_DATA, per process
    writable: tuple[str, ...] = ()  # paths the sandbox can write (harsh: no EXECUTE there)
    exec_files: tuple[str, ...] = ()  # read-only binds inside writable trees that must run


def enter_argv(settings: KernelSettings) -> list[str]:
    """Pure: the arguments between `_enter` and `--`."""
    args = ["--level", settings.level]
    if settings.max_pids is not None:
        args += ["--nproc", str(settings.max_pids)]
    if settings.max_memory is not None:
        args += ["--data", str(settings.max_memory)]
    for path in settings.writable:
        args += ["--writable", path]
    for path in settings.exec_files:
        args += ["--exec-file", path]
    return args


def parse(argv: list[str]) -> tuple[KernelSettings, list[str]]:
    """Inverse of `enter_argv` plus the agent argv after `--`."""
    if "--" not in argv:
        raise SandboxError("_enter: missing `--` before the agent's argv", EXIT_USAGE)
    split = argv.index("--")
    head, agent = argv[:split], argv[split + 1 :]
    if len(head) % 2:
        raise SandboxError(f"_enter: option without a value in {head!r}", EXIT_USAGE)
    level, nproc, data = "standard", None, None
    writable: list[str] = []
    exec_files: list[str] = []
    for flag, value in zip(head[::2], head[1::2], strict=True):
        try:
            if flag == "--level" and value in LEVELS:
                level = value
            elif flag == "--nproc":
                nproc = int(value)
            elif flag == "--data":
                data = int(value)
            elif flag == "--writable" and value.startswith("/"):
                writable.append(value)
            elif flag == "--exec-file" and value.startswith("/"):
                exec_files.append(value)
            else:
                raise ValueError
        except ValueError:
            raise SandboxError(f"_enter: bad option {flag} {value!r}", EXIT_USAGE) from None
    if not agent or not agent[0].startswith("/"):
        raise SandboxError("_enter: the agent must be named by absolute path", EXIT_USAGE)
    return KernelSettings(level, nproc, data, tuple(writable), tuple(exec_files)), agent


def apply_rlimits(settings: KernelSettings) -> None:
    # Soft = hard: with every capability dropped the agent cannot raise them.
    caps = [(resource.RLIMIT_CORE, 0)]  # no core files: they would hold the agent's secrets
    if settings.max_pids is not None:
        caps.append((resource.RLIMIT_NPROC, settings.max_pids))
    if settings.max_memory is not None:
        caps.append((resource.RLIMIT_DATA, settings.max_memory))
        sys.stderr.write(
            "claude-sandbox: warning: max-memory is a per-process cap (RLIMIT_DATA) here, "
            "not a cap on the whole sandbox\n"
        )
    for which, value in caps:
        try:
            resource.setrlimit(which, (value, value))
        except (OSError, ValueError) as exc:
            raise SandboxError(f"_enter: cannot set rlimit: {exc}", EXIT_UNAVAILABLE) from None


def main(argv: list[str]) -> NoReturn:
    """`argv` is everything after `_enter`."""
    settings, agent = parse(argv)
    apply_rlimits(settings)
    landlock.enter(settings.level, settings.writable, settings.exec_files)
    try:
        os.execv(agent[0], agent)
    except OSError as exc:
        raise SandboxError(f"cannot run {agent[0]}: {exc.strerror}", EXIT_UNAVAILABLE) from None


def describe(settings: KernelSettings) -> list[str]:
    """The in-sandbox layers, for `claude-sandbox explain`."""
    lines = landlock.describe(settings.level)
    lines.append("rlimits inside: RLIMIT_CORE 0")
    if settings.max_pids is not None:
        lines.append(f"  RLIMIT_NPROC {settings.max_pids} (this sandbox's user namespace)")
    if settings.max_memory is not None:
        lines.append(f"  RLIMIT_DATA {settings.max_memory} (per process)")
    return lines
