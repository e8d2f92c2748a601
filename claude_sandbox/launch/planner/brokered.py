"""The launcher's half of `hardening = brokered` (the inside half is inside/broker.py).

What the level needs from the host is read here (`read`): the shells the command
client stands in for, and the programs the agent's own program needs to start (its
script interpreter, the dynamic loader). `fields` turns them and the plan's mounts
into the inner record's brokered fields; `MOUNT` is the one mount the level adds.
The design and its measured side doors: docs/adr/0009-the-enforced-process-tree.md.
"""

from __future__ import annotations

import itertools
import os

from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_REFUSED, EXIT_UNAVAILABLE, SandboxError
from claude_sandbox.core.record import record
from claude_sandbox.launch.planner.mounts import Mount, Writable, under

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

MOUNT = Mount("tmpfs", paths.BROKER_DIR, "brokered: the command server's socket, where "
              "the agent's domain cannot write (check 63)", size=1 << 20)


@record
class Runners:
    shells: tuple[str, ...]  # the real shell files, resolved: the client covers each
    programs: tuple[str, ...]  # the agent's program, its interpreters and the loaders


def read(command: str, package: str, environ: Mapping[str, str],
         tools: Sequence[str] = ()) -> Runners:
    """The host facts the level needs; refuses when the installation lacks its parts.

    `command` is what `_enter` execs, `package` the agent's installed tree. A command
    that is itself a shell is the client in the agent's view: it runs through the
    server (`claude-sandbox shell -- sh -c ...`)."""
    for part in (paths.COMMAND_CLIENT, paths.BROKER_DIR):
        if not os.path.exists(part):
            raise SandboxError(f"hardening = brokered: {part} is missing; reinstall "
                               "claude-sandbox (install.sh builds the command client)",
                               EXIT_UNAVAILABLE)
    shells = {os.path.realpath(s) for s in paths.SHELLS if os.path.isfile(s)}
    search = environ.get("PATH", "").split(":")
    # `tools`: the profile's direct tools (names, found on PATH) and the operator's
    # agent-exec (paths); a shell among them stays the client's.
    found_tools = [t if t.startswith("/") else paths.which(t, search) or "" for t in tools]
    programs = [command, package, _npm_package(os.path.realpath(command)),
                *_interpreters(command, environ.get("PATH", "")), *paths.LOADERS,
                *filter(None, found_tools)]
    found = {os.path.realpath(p) for p in programs if os.path.exists(p)} - shells
    return Runners(tuple(sorted(shells)), tuple(sorted(found)))


def _npm_package(program: str) -> str:
    """The npm package a program belongs to (codex starts a native binary of its own
    from there), or the program itself."""
    parts = program.split("/")
    if "node_modules" not in parts[:-1]:
        return program
    at = len(parts) - 1 - parts[::-1].index("node_modules")
    scoped = parts[at + 1].startswith("@") and at + 2 < len(parts)
    return "/".join(parts[:at + (3 if scoped else 2)])


def _interpreters(program: str, search: str) -> list[str]:
    """A script's `#!` interpreter, and the program an `env` interpreter starts."""
    try:
        with open(program, "rb") as handle:
            head = handle.read(256)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return []
    found = [words[0]]
    if os.path.basename(words[0]) == "env":
        names = [w for w in words[1:] if not w.startswith("-")]
        found += [p for p in (paths.which(names[0], search.split(":")),) if p] if names else []
    return found


def fields(runners: Runners, layout: Writable, mount_list: Sequence[Mount], uid: int,
           env: Mapping[str, str], command: Sequence[str], local_ports: Sequence[int],
           callback_ports: Sequence[int]) -> dict[str, tuple[Any, ...]]:
    """The inner record's brokered fields, from the plan's own mounts, environment and
    the agent's command line."""
    if uid == 0:
        raise SandboxError(
            "hardening = brokered does not run as root yet: its command server makes a "
            "user namespace per command, and uid 0 inside the sandbox cannot map itself "
            "into one; launch as an unprivileged user, or use hardening = harsh",
            EXIT_REFUSED)
    commands_only = (layout.workspace, *layout.allow_write)
    writable = [m.dest for m in mount_list if m.kind in ("bind", "tmpfs")]
    # Not /proc, writable where the host masks it: only for the uid maps, written before
    # the agent's domain is entered.
    agent_writable = [w for w in dict.fromkeys([*writable, "/dev"])
                      if not under(w, (*commands_only, paths.BROKER_DIR, "/proc"))]
    return {
        "commands_only": commands_only,
        "shells": runners.shells,
        "agent_writable": tuple(agent_writable),
        # Nothing the agent or its commands can write: its program and tools come from
        # read-only places (a tool PATH finds in the state store does not run).
        "agent_exec": (paths.COMMAND_CLIENT, *(p for p in runners.programs if not under(
            p, (*commands_only, *agent_writable)))),
        # The agent's own arguments count only where they configure it (codex's
        # `-c base_url=...`), not a prompt that mentions a URL.
        "agent_connect": connect_ports([*env.values(), *_config_values(command)], local_ports),
        "agent_bind": tuple(sorted(set(callback_ports))),
    }


# HTTPS, the agents' APIs; the rest only where the environment or the operator names it.
CONNECT_PORTS = (443,)
_SEPARATORS = str.maketrans({c: " " for c in ",;\"'{}()<>"})  # around URLs in config text
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def connect_ports(texts: Sequence[str], local_ports: Sequence[int]) -> tuple[int, ...]:
    """The TCP ports the agent's own process may connect to: 443, the port of every URL
    in `texts` (the sandbox's environment: a base URL, a proxy; the agent's arguments),
    and each local-port (a local model, a service relayed into the jail)."""
    found = {*CONNECT_PORTS, *local_ports}
    for value in texts:
        for token in value.translate(_SEPARATORS).split():
            scheme, sep, rest = token.partition("://")
            if not sep:
                continue
            host = rest.split("/", 1)[0].rpartition("@")[2]
            port = host.rpartition(":")[2] if ":" in host.rpartition("]")[2] else ""
            if port.isdigit() and 0 < int(port) < 65536:
                found.add(int(port))
            elif scheme.lower() in _DEFAULT_PORTS:
                found.add(_DEFAULT_PORTS[scheme.lower()])
    return tuple(sorted(found))


def _config_values(argv: Sequence[str]) -> list[str]:
    return [value for flag, value in itertools.pairwise(argv) if flag in ("-c", "--config")]
