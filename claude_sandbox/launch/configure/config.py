"""The operator's configuration: /etc/claude-sandbox.conf and CLAUDE_SANDBOX_* variables.

Read from /etc only, never from the workspace (docs/reference/configuration.md): a file the
agent can write must not widen its next launch. The keys and variables are the
existing tool's plus ours; unlike that tool we are strict: an
unknown key, a malformed line, a relative path, a CIDR where an address is
wanted or a port out of range refuses the launch naming FILE:LINE or the
variable. Our own keys (hardening, max-pids, max-memory) have no variable:
the launching environment cannot loosen them.

The environment may narrow what the file allows, never widen it (ADR 0005):
a variable that would add a writable path, a port, an address or a passed
variable the file does not name, or turn the jail off, refuses the launch,
unless the file lets that key be widened (`env-may-widen = KEY`).
"""

from __future__ import annotations

import os

from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_CONFIG, SandboxError
from claude_sandbox.core.record import record
from claude_sandbox.launch.configure import profiles, values
from claude_sandbox.launch.configure.keys import KEYS, KEYS_BY_NAME, Key, Kind

# types.MappingProxyType, as the types module itself finds it: that module is imported
# by nothing else of a launch (0.4 ms of it).
MappingProxyType = type(type.__dict__)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


@record
class Config:
    workspace_root: str | None = None
    no_forge: bool = False
    allow_write: tuple[str, ...] = ()
    pass_env: tuple[str, ...] = ()
    egress_jail: bool = True
    allow_ip: tuple[str, ...] = ()
    local_ports: tuple[int, ...] = ()
    callback_ports: tuple[int, ...] = ()
    hardening: str = "standard"
    workspace_mode: str = "live"  # review: the workspace is an overlay until applied
    egress_policy: str = "allow-list"
    allow_domain: tuple[str, ...] = ()  # allow-domain values as written (egresspolicy)
    credential: tuple[str, ...] = ()  # credential values as written (credentials.py)
    allow_vsock: bool = False  # the seccomp filter's AF_VSOCK row dropped
    max_pids: int | None = None
    max_memory: int | None = None
    state_dir: str | None = None  # None: each user's ~/.local/state/claude-sandbox
    protect: tuple[str, ...] = ()
    unprotect: tuple[str, ...] = ()
    allow_read: tuple[str, ...] = ()
    allow_socket: tuple[str, ...] = ()
    env_may_widen: tuple[str, ...] = ()
    tmpfs_size: int = 1 << 30
    agent_exec: tuple[str, ...] = ()  # brokered: what the agent itself may execute
    offline_commands: bool = False  # brokered: commands without a network
    # Where each non-default value came from ("FILE:LINE" or the variable).
    origins: Mapping[str, str] = MappingProxyType({})
    # Where each path of allow-write, allow-read and allow-socket came from.
    path_origins: Mapping[str, str] = MappingProxyType({})


@record
class _Line:
    key: Key
    agent: str | None
    value: object  # parsed; True for a bare flag


def _split_line(raw: str, where: str, agents: tuple[str, ...]) -> _Line | None:
    text = raw.split("#", 1)[0].strip()
    if not text:
        return None
    name, sep, value = text.partition("=")
    name = name.strip()
    key_name, dot, agent = name.partition(".")
    key = KEYS_BY_NAME.get(key_name)
    if key is None or not values.is_key(name):
        raise SandboxError(f"{where}: unknown key {name!r}", EXIT_CONFIG)
    if dot and not key.per_agent:
        raise SandboxError(f"{where}: {key_name} cannot be set per agent", EXIT_CONFIG)
    if dot and agent not in agents:
        raise SandboxError(f"{where}: {agent!r} is not an agent ({', '.join(agents)})", EXIT_CONFIG)
    if not sep:
        if key.kind is not Kind.FLAG:
            raise SandboxError(
                f"{where}: {key_name} needs a value (`{key_name} = ...`)", EXIT_CONFIG
            )
        return _Line(key, agent or None, True)
    value = value.strip()
    if not value:
        raise SandboxError(f"{where}: {key_name} has an empty value", EXIT_CONFIG)
    parser = values.SCALAR_PARSERS.get(key.kind) or values.ITEM_PARSERS[key.kind]
    return _Line(key, agent or None, parser(value, where))


def read_file(path: str) -> str | None:
    """The file's text; None when it does not exist; a refusal when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise SandboxError(f"{path}: cannot be read ({error})", EXIT_CONFIG) from None



def load(agent: str, environ: Mapping[str, str]) -> Config:
    """The operator's file (absent: the defaults) and the environment, for `agent`."""
    return parse(read_file(paths.CONFIG_FILE), environ, agent=agent,
                 agents=profiles.AGENT_NAMES, path=paths.CONFIG_FILE)

def parse(
    text: str | None,
    environ: Mapping[str, str],
    *,
    agent: str,
    agents: tuple[str, ...],
    path: str,
) -> Config:
    """The configuration for `agent`: the file's lines, then the environment.

    Pure: the caller reads the file. The file: scalars take the last line (a
    per-agent line wins), lists append every line. The environment may then
    narrow what the file says, never widen it (`_narrow`).
    """
    scalars: dict[str, Any] = {}
    lists: dict[str, list[Any]] = {key.name: [] for key in KEYS
                                   if key.kind in values.ITEM_PARSERS}
    origins: dict[str, str] = {}
    items: dict[tuple[str, object], str] = {}
    agent_specific: set[str] = set()
    for number, raw in enumerate((text or "").splitlines(), start=1):
        where = f"{path}:{number}"
        line = _split_line(raw, where, agents)
        if line is None:
            continue
        key = line.key
        if line.agent is not None and line.agent != agent:
            continue  # still parsed (_split_line): a typo for another agent is an error too
        if key.kind in values.ITEM_PARSERS:
            lists[key.name].append(line.value)
            items.setdefault((key.name, line.value), where)
        elif line.agent is None and key.name in agent_specific:
            continue  # the per-agent line wins, whatever the order
        else:
            scalars[key.name] = line.value
            if line.agent is not None:
                agent_specific.add(key.name)
        origins[key.name] = where

    may_widen = {str(name) for name in lists["env-may-widen"]}
    for key in KEYS:
        if key.variable is None or key.variable not in environ:
            continue
        value = environ[key.variable]
        where = f"${key.variable}"
        if key.kind in values.ITEM_PARSERS:
            parts = [item.strip() for item in value.replace("\n", ",").split(",") if item.strip()]
            parsed_items = [values.ITEM_PARSERS[key.kind](part, where) for part in parts]
            for item in parsed_items:  # every item validated before any is judged
                if item not in lists[key.name]:
                    _refuse_widening(key, where, f"{item} is not in {path}", may_widen, path)
                    lists[key.name].append(item)
                    items[(key.name, item)] = where
        elif key.kind is Kind.FLAG and value == "":
            continue
        else:
            parsed = values.SCALAR_PARSERS[key.kind](value.strip(), where)
            _narrow_scalar(key, parsed, scalars.get(key.name), where, may_widen, path)
            scalars[key.name] = parsed
        origins[key.name] = where

    return _assemble(scalars, lists, origins, items)


def _refuse_widening(key: Key, where: str, what: str, may_widen: set[str], path: str) -> None:
    """The environment widened `key`: refuse unless the file lets it."""
    if key.name in may_widen:
        return
    raise SandboxError(
        f"{where}: {what}; the environment may only narrow what the operator's file allows. "
        f"Set it in {path}, or let the environment widen it there with "
        f"`env-may-widen = {key.name}`",
        EXIT_CONFIG,
    )


def _narrow_scalar(
    key: Key, value: object, current: object, where: str, may_widen: set[str], path: str
) -> None:
    """Refuse a variable that loosens a scalar the file set (or its default)."""
    if key.name == "egress-jail" and value is False and current is not False:
        _refuse_widening(key, where, "it turns the egress jail off", may_widen, path)
    elif key.name == "no-forge" and value is False and current is True:
        _refuse_widening(key, where, "it turns no-forge off", may_widen, path)
    elif key.name == "workspace-mode" and value == "live" and current == "review":
        _refuse_widening(key, where, "it lets the agent write the workspace the file "
                         "keeps in review", may_widen, path)
    elif key.name == "local-model-port" and value not in (0, current):
        _refuse_widening(key, where, f"port {value} is not the file's", may_widen, path)
    elif key.name == "workspace-root" and current is not None:
        # Resolved: a link planted under the file's root must not lead the root elsewhere.
        value, current = os.path.realpath(str(value)), os.path.realpath(str(current))
        if not paths.under(value, current):
            _refuse_widening(key, where, f"{value} is outside the file's {current}",
                             may_widen, path)


def _dedupe(items: list[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(items))


def _assemble(
    scalars: dict[str, Any],
    lists: dict[str, list[Any]],
    origins: dict[str, str],
    items: dict[tuple[str, object], str],
) -> Config:
    local_ports = list(lists["local-port"])
    if scalars.get("local-model-port"):
        local_ports.append(scalars["local-model-port"])
    callback_ports = lists["callback-port"]
    both = sorted(set(local_ports) & set(callback_ports))
    if both:
        where = origins.get("callback-port", "configuration")
        raise SandboxError(
            f"{where}: port {both[0]} is both a local-port and a callback-port", EXIT_CONFIG
        )
    where_from = {
        str(value): where
        for (name, value), where in items.items()
        if name in ("allow-write", "allow-read", "allow-socket")
    }
    return Config(
        workspace_root=scalars.get("workspace-root"),
        no_forge=scalars.get("no-forge", False),
        allow_write=_dedupe(lists["allow-write"]),
        pass_env=_dedupe(lists["pass-env"]),
        egress_jail=scalars.get("egress-jail", True),
        allow_ip=_dedupe(lists["allow-ip"]),
        local_ports=_dedupe(local_ports),
        callback_ports=_dedupe(callback_ports),
        hardening=scalars.get("hardening", "standard"),
        workspace_mode=scalars.get("workspace-mode", "live"),
        egress_policy=scalars.get("egress-policy", "allow-list"),
        allow_domain=_dedupe(lists["allow-domain"]),
        credential=_dedupe(lists["credential"]),
        allow_vsock=scalars.get("allow-vsock", False),
        max_pids=scalars.get("max-pids"),
        max_memory=scalars.get("max-memory"),
        state_dir=scalars.get("state-dir"),
        protect=_dedupe(lists["protect"]),
        unprotect=_dedupe(lists["unprotect"]),
        allow_read=_dedupe(lists["allow-read"]),
        allow_socket=_dedupe(lists["allow-socket"]),
        env_may_widen=_dedupe(lists["env-may-widen"]),
        tmpfs_size=scalars.get("tmpfs-size", 1 << 30),
        agent_exec=_dedupe(lists["agent-exec"]),
        offline_commands=scalars.get("offline-commands", False),
        origins=MappingProxyType(dict(origins)),
        path_origins=MappingProxyType(where_from),
    )


DEFAULT_FILE = """\
# /etc/claude-sandbox.conf: the operator's configuration for claude-sandbox.
# One directive a line: `key = value`, or a bare `key` for a flag; `#` starts a
# comment. Lists (allow-write, pass-env, allow-ip, local-port, callback-port)
# take one item a line. An unknown key or a bad value refuses every launch,
# naming this file and the line. `claude-sandbox explain` shows the result.
#
# workspace-root = /workspaces/project   # the writable root (default: $PWD)
# no-forge                               # no gh/glab config, no credential helpers
# allow-write = /srv/shared-cache        # an extra writable path
# pass-env = ANTHROPIC_API_KEY           # let one variable through
# egress-jail = 0                        # turn the network jail off (not advised)
# allow-ip = 10.1.2.3                    # reach one private address
# local-port = 11434                     # reach the container's 127.0.0.1:11434
# callback-port = 54545                  # let a browser reach a login callback inside
# hardening = standard                   # harsh, brokered; per agent: hardening.codex = harsh
# workspace-mode = review                # changes wait for `claude-sandbox review`
# egress-policy = open                   # every public name (default: allow-list)
# allow-domain = example.com             # reach one more name on 80 and 443
# allow-domain = db.example.com:5432     # or exactly one port, for any TCP
# credential = GH_TOKEN                  # the agent holds a sentinel; the proxy adds the token
# credential = DEPLOY_TOKEN api.example.com  # the same for a variable and its hosts
# max-pids = 4096                        # cap processes
# max-memory = 8G                        # cap memory
"""
