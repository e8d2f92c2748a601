"""The launch's behaviour on this host, as data: the equality check of a restructuring.

Run it on both sides of a change that should change no behaviour, as root and as a
user, from the same workspace, and compare the two outputs:

    python -m tests.behaviour > after.json

What it writes: for each agent and hardening level, the plan (the late masks aside,
whose form is the plan's own), bwrap's command line and the inner record's bytes; the
seccomp program's bytes for every level, flag and machine; and the message and status
of each of a set of refused configuration lines and malformed inner records. The one
expected difference is the checkout's path in the interpreter's command line.
"""

from __future__ import annotations

import json
import os
import sys

from claude_sandbox.core.errors import SandboxError
from claude_sandbox.core.record import replace
from claude_sandbox.inside import spec
from claude_sandbox.launch import decide
from claude_sandbox.launch.configure import config, profiles, request
from claude_sandbox.launch.facts import gather, hostfacts
from claude_sandbox.launch.planner import plan, render, seccomp
from claude_sandbox.launch.session import state

_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "TERM": "xterm"}
_REFUSED_LINES = (
    "nonsense", "allow-write = relative/path", "max-pids = -1", "hardening = soft",
    "egress-policy = maybe", "allow-ip = 10.0.0.0/8", "allow-domain = *", "credential = 1X",
    "claude.max-memory = 12Q", "local-ports = 70000", "state-dir = /", "workspace-mode = x",
    "allow-socket = /run/x.sock\nallow-socket = rel", "pass-env = LD_PRELOAD",
    "tmpfs-size = 0",
)
_MALFORMED_RECORDS = (b"bad\0inner", b"level\x001\x00standard\x00")


def _plans(out: dict[str, object]) -> None:
    levels = ("standard", "harsh") + (("brokered",) if os.getuid() else ())
    for agent in ("claude", "codex", "pi"):
        configured = decide.configure(agent, _ENV)
        for level in levels:
            cfg = replace(configured.cfg, hardening=level)
            asked = request.Request(agent=agent, command=None, args=())
            store = state.store_root(cfg.state_dir, hostfacts.login_home(), os.getuid())
            gathered = gather.gather(configured.profile, cfg, asked, _ENV, (), store)
            made = plan.make(configured.profile, cfg, gathered, configured.limit_plan)
            whole = json.loads(render.as_json(made))
            for name in ("late", "hide_outer_proc", "root_only", "noexec"):
                whole.pop(name, None)
            fds = {name: "9" for name in render.named_fds(made)}
            helper = 7 if made.inner.late_masks else None
            out[f"{agent}/{level}/plan"] = whole
            out[f"{agent}/{level}/argv"] = render.bwrap_argv(made, "/usr/bin/bwrap", fds)
            out[f"{agent}/{level}/inner"] = spec.encode(made.inner, helper).hex()


def _refusals(out: dict[str, object]) -> None:
    agents = tuple(profile.name for profile in profiles.PROFILES)
    for text in _REFUSED_LINES:
        try:
            config.parse(text + "\n", {}, agent="claude", agents=agents, path="/etc/x.conf")
            out[f"refuse/{text}"] = "accepted"
        except SandboxError as error:
            out[f"refuse/{text}"] = [str(error), error.status]
    for data in _MALFORMED_RECORDS:
        try:
            spec.decode(data)
            out[f"decode/{data!r}"] = "accepted"
        except SandboxError as error:
            out[f"decode/{data!r}"] = [str(error), error.status]


def main() -> None:
    out: dict[str, object] = {}
    _plans(out)
    for level in ("standard", "harsh", "brokered"):
        for flags in ((), ("allow-vsock",), (seccomp.MEMORY_PER_PROCESS,)):
            for machine in ("x86_64", "aarch64"):
                program = seccomp.build_filter(level, machine, flags)
                out[f"seccomp/{level}/{','.join(flags)}/{machine}"] = program.hex()
    _refusals(out)
    json.dump(out, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
