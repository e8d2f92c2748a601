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
from collections.abc import Callable, Mapping
from types import MappingProxyType

from .errors import EXIT_CONFIG, SandboxError
from .record import record


@record
class KindOf:
    value: str  # what docs/reference/configuration.md shows


class Kind:
    """The kinds of value a key takes. Not an Enum: enum costs ms at every launch."""

    PATH = KindOf("absolute path")
    FLAG = KindOf("flag (bare, or = 1/0)")
    PATHS = KindOf("list of absolute paths")
    NAMES = KindOf("list of variable names")
    ADDRESSES = KindOf("list of single IPv4 addresses")
    PORTS = KindOf("list of ports 1-65535")
    PORT = KindOf("port 1-65535, 0 for off")
    LEVEL = KindOf("standard | harsh")
    COUNT = KindOf("positive integer")
    SIZE = KindOf("size in bytes, with an optional K, M or G suffix")
    KEYS = KindOf("list of key names")
    RELPATHS = KindOf("list of paths relative to the workspace")


@record
class Key:
    name: str
    variable: str | None  # None: /etc only, the environment cannot set it
    kind: KindOf
    default: str
    meaning: str
    per_agent: bool = False  # may be written `name.AGENT = value`


# The schema, one row a key. docs/reference/configuration.md is rendered from it.
KEYS: tuple[Key, ...] = (
    Key(
        "workspace-root",
        "CLAUDE_SANDBOX_WORKSPACE_ROOT",
        Kind.PATH,
        "$PWD",
        "the writable root of the sandbox",
    ),
    Key(
        "no-forge",
        "CLAUDE_SANDBOX_NO_FORGE",
        Kind.FLAG,
        "off",
        "no gh/glab config binds and no forge credential helpers in the gitconfig",
    ),
    Key(
        "allow-write",
        "CLAUDE_SANDBOX_ALLOW_WRITE",
        Kind.PATHS,
        "(none)",
        "extra writable binds, applied after the masks they reach through",
    ),
    Key(
        "pass-env",
        "CLAUDE_SANDBOX_PASS_ENV",
        Kind.NAMES,
        "(none)",
        "variables let through the cleared environment (names only; the deny-list applies)",
    ),
    Key(
        "egress-jail",
        "CLAUDE_SANDBOX_EGRESS_JAIL",
        Kind.FLAG,
        "on",
        "the per-launch network namespace that reaches the internet but not private networks",
    ),
    Key(
        "allow-ip",
        "CLAUDE_SANDBOX_ALLOW_IP",
        Kind.ADDRESSES,
        "(none)",
        "single addresses reachable past the private-range blackholes",
    ),
    Key(
        "local-port",
        "CLAUDE_SANDBOX_LOCAL_PORTS",
        Kind.PORTS,
        "(none)",
        "relay from inside the jail to the container's 127.0.0.1:PORT",
    ),
    Key(
        "local-model-port",
        "CLAUDE_SANDBOX_LOCAL_MODEL_PORT",
        Kind.PORT,
        "0",
        "the same, for one local model server",
    ),
    Key(
        "callback-port",
        "CLAUDE_SANDBOX_CALLBACK_PORTS",
        Kind.PORTS,
        "(none)",
        "relay from the container's 127.0.0.1:PORT into the jail (browser login callbacks)",
    ),
    Key(
        "env-may-widen",
        None,
        Kind.KEYS,
        "(none)",
        "keys whose variable may widen this file's value (by default the environment may "
        "only narrow it)",
    ),
    Key(
        "state-dir",
        None,
        Kind.PATH,
        "~/.local/state/claude-sandbox",
        "where each user's one-way agent state lives (the agents' homes); `~/` is the "
        "launching user's home",
    ),
    Key(
        "protect",
        None,
        Kind.RELPATHS,
        "(none)",
        "another workspace control path, read-only inside (adds to the built-in list)",
    ),
    Key(
        "unprotect",
        None,
        Kind.RELPATHS,
        "(none)",
        "a built-in workspace control path to leave writable",
    ),
    Key(
        "allow-read",
        None,
        Kind.PATHS,
        "(none)",
        "outside paths visible read-only at the same place (a package cache, a toolchain)",
    ),
    Key(
        "allow-socket",
        None,
        Kind.PATHS,
        "(none)",
        "unix sockets (or directories of them) outside the workspace the sandbox may connect to",
    ),
    Key(
        "tmpfs-size",
        None,
        Kind.SIZE,
        "1G",
        "the size of each private tmpfs (/tmp, /run, /var/tmp, /dev/shm)",
        per_agent=True,
    ),
    Key(
        "hardening",
        None,
        Kind.LEVEL,
        "standard",
        "kernel layers: standard, or harsh (no nested user namespaces, no exec where writable)",
        per_agent=True,
    ),
    Key(
        "max-pids",
        None,
        Kind.COUNT,
        "(no cap)",
        "the most processes the sandbox may hold",
        per_agent=True,
    ),
    Key(
        "max-memory",
        None,
        Kind.SIZE,
        "(no cap)",
        "the most memory the sandbox may use",
        per_agent=True,
    ),
)
KEYS_BY_NAME = {key.name: key for key in KEYS}

# Variables pass-env may never name: they redirect loaders, interpreters, shells
# or git, carry the sandbox's own identity, or reach the outer desktop and IDE.
DENIED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "PWD",
        "OLDPWD",
        "TMPDIR",
        "IS_SANDBOX",
        "IS_SANDBOX_AGENT",
        "CLAUDE_CODE_TMPDIR",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PROMPT_COMMAND",
        "IFS",
        "CDPATH",
        "NODE_OPTIONS",
        "NODE_PATH",
        "PERL5LIB",
        "PERL5OPT",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_EXEC_PATH",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "SSH_AUTH_SOCK",
        "GPG_AGENT_INFO",
        "DISPLAY",
        "WAYLAND_DISPLAY",
        "XAUTHORITY",
        "DBUS_SESSION_BUS_ADDRESS",
        "XDG_RUNTIME_DIR",
        "VSCODE_IPC_HOOK_CLI",
        "VSCODE_GIT_IPC_HANDLE",
        "BROWSER",
    }
)
DENIED_PREFIXES = ("LD_", "PYTHON", "GIT_CONFIG", "CLAUDE_SANDBOX_", "BASH_FUNC_", "DYLD_")

# Plain string tests, not regular expressions: `re` costs ms at every launch.
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_REST = _NAME_START | frozenset("0123456789")
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz-")
_AGENT_CHARS = _KEY_CHARS | frozenset("0123456789")
_SIZE_SCALE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _is_name(text: str) -> bool:
    return bool(text) and text[0] in _NAME_START and all(c in _NAME_REST for c in text)


def _is_key(name: str) -> bool:
    key, dot, agent = name.partition(".")
    if not key or not set(key) <= _KEY_CHARS:
        return False
    return not dot or (bool(agent) and set(agent) <= _AGENT_CHARS)


def _ipv4(text: str) -> tuple[int, int, int, int] | None:
    """The four octets of a dotted-quad address: decimal, no leading zeros, no CIDR."""
    parts = text.split(".")
    if len(parts) != 4:
        return None
    octets = []
    for part in parts:
        if not part.isascii() or not part.isdigit() or (len(part) > 1 and part[0] == "0"):
            return None
        if int(part) > 255:
            return None
        octets.append(int(part))
    return octets[0], octets[1], octets[2], octets[3]
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


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
    max_pids: int | None = None
    max_memory: int | None = None
    state_dir: str | None = None  # None: each user's ~/.local/state/claude-sandbox
    protect: tuple[str, ...] = ()
    unprotect: tuple[str, ...] = ()
    allow_read: tuple[str, ...] = ()
    allow_socket: tuple[str, ...] = ()
    env_may_widen: tuple[str, ...] = ()
    tmpfs_size: int = 1 << 30
    # Where each non-default value came from ("FILE:LINE" or the variable).
    origins: Mapping[str, str] = MappingProxyType({})
    # Where each path of allow-write, allow-read and allow-socket came from.
    path_origins: Mapping[str, str] = MappingProxyType({})


def denied_reason(name: str) -> str | None:
    """Why pass-env may not name `name`, or None when it may."""
    if name in DENIED_NAMES:
        return f"{name} is on the pass-env deny-list"
    for prefix in DENIED_PREFIXES:
        if name.startswith(prefix):
            return f"{name} is on the pass-env deny-list ({prefix}*)"
    return None


def _path(text: str, where: str) -> str:
    if not text.startswith("/"):
        raise SandboxError(f"{where}: {text!r} is not an absolute path", EXIT_CONFIG)
    if "\0" in text or "\n" in text:
        raise SandboxError(f"{where}: the path holds a control character", EXIT_CONFIG)
    return os.path.normpath(text)


def _flag(text: str, where: str) -> bool:
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise SandboxError(f"{where}: {text!r} is not a flag value (1 or 0)", EXIT_CONFIG)


def _name(text: str, where: str) -> str:
    if not _is_name(text):
        raise SandboxError(f"{where}: {text!r} is not a variable name", EXIT_CONFIG)
    reason = denied_reason(text)
    if reason:
        raise SandboxError(f"{where}: {reason}", EXIT_CONFIG)
    return text


def _address(text: str, where: str) -> str:
    octets = _ipv4(text)
    if octets is None:
        raise SandboxError(
            f"{where}: {text!r} is not a single IPv4 address (no CIDR, no names)", EXIT_CONFIG
        )
    # 0.0.0.0, loopback and multicast are never a remote host to let through.
    if octets == (0, 0, 0, 0) or octets[0] == 127 or 224 <= octets[0] <= 239:
        raise SandboxError(f"{where}: {text} cannot be allowed through the jail", EXIT_CONFIG)
    return text


def _port(text: str, where: str, *, zero_ok: bool = False) -> int:
    if not text.isascii() or not text.isdigit():
        raise SandboxError(f"{where}: {text!r} is not a port number", EXIT_CONFIG)
    port = int(text)
    if port == 0 and zero_ok:
        return 0
    if not 1 <= port <= 65535:
        raise SandboxError(f"{where}: port {port} is outside 1-65535", EXIT_CONFIG)
    return port


def _key_name(text: str, where: str) -> str:
    key = KEYS_BY_NAME.get(text)
    if key is None or key.variable is None:
        raise SandboxError(f"{where}: {text!r} is not a key with a variable", EXIT_CONFIG)
    return text


def _relative_path(text: str, where: str) -> str:
    """A workspace-relative path: no leading /, no `..`, no empty or `.` parts."""
    parts = text.rstrip("/").split("/")
    if text.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise SandboxError(
            f"{where}: {text!r} is not a plain path inside the workspace (like .vscode or "
            ".git/hooks)",
            EXIT_CONFIG,
        )
    if any(c in text for c in "\0\n"):
        raise SandboxError(f"{where}: the path holds a control character", EXIT_CONFIG)
    return "/".join(parts)


def _level(text: str, where: str) -> str:
    if text not in ("standard", "harsh"):
        raise SandboxError(f"{where}: {text!r} is not standard or harsh", EXIT_CONFIG)
    return text


def _count(text: str, where: str) -> int:
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise SandboxError(f"{where}: {text!r} is not a positive integer", EXIT_CONFIG)
    return int(text)


def _size(text: str, where: str) -> int:
    upper = text.upper()
    digits, suffix = (upper[:-1], upper[-1]) if upper[-1:] in "KMG" else (upper, "")
    if not digits.isascii() or not digits.isdigit() or int(digits) < 1:
        raise SandboxError(f"{where}: {text!r} is not a size such as 512M or 2G", EXIT_CONFIG)
    return int(digits) * _SIZE_SCALE[suffix]


_SCALAR_PARSERS: dict[KindOf, Callable[[str, str], object]] = {
    Kind.PATH: _path,
    Kind.FLAG: _flag,
    Kind.PORT: lambda text, where: _port(text, where, zero_ok=True),
    Kind.LEVEL: _level,
    Kind.COUNT: _count,
    Kind.SIZE: _size,
}
_ITEM_PARSERS: dict[KindOf, Callable[[str, str], object]] = {
    Kind.PATHS: _path,
    Kind.NAMES: _name,
    Kind.ADDRESSES: _address,
    Kind.PORTS: _port,
    Kind.KEYS: _key_name,
    Kind.RELPATHS: _relative_path,
}


@record
class _Line:
    key: Key
    agent: str | None
    value: str | None  # None for a bare flag
    where: str


def _split_line(raw: str, where: str, agents: tuple[str, ...]) -> _Line | None:
    text = raw.split("#", 1)[0].strip()
    if not text:
        return None
    name, sep, value = text.partition("=")
    name = name.strip()
    key_name, dot, agent = name.partition(".")
    key = KEYS_BY_NAME.get(key_name)
    if key is None or not _is_key(name):
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
        return _Line(key, agent or None, None, where)
    value = value.strip()
    if not value:
        raise SandboxError(f"{where}: {key_name} has an empty value", EXIT_CONFIG)
    return _Line(key, agent or None, value, where)


def read_file(path: str) -> str | None:
    """The file's text; None when it does not exist; a refusal when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise SandboxError(f"{path}: cannot be read ({error})", EXIT_CONFIG) from None


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
    scalars: dict[str, object] = {}
    lists: dict[str, list[object]] = {key.name: [] for key in KEYS if key.kind in _ITEM_PARSERS}
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
            _parse_value(line)  # still validated: a typo for another agent is an error too
            continue
        if key.kind in _ITEM_PARSERS:
            value = _parse_value(line)
            lists[key.name].append(value)
            items.setdefault((key.name, value), where)
        elif line.agent is None and key.name in agent_specific:
            _parse_value(line)  # the per-agent line wins, whatever the order
            continue
        else:
            scalars[key.name] = _parse_value(line)
            if line.agent is not None:
                agent_specific.add(key.name)
        origins[key.name] = where

    may_widen = {str(name) for name in lists["env-may-widen"]}
    for key in KEYS:
        if key.variable is None or key.variable not in environ:
            continue
        value = environ[key.variable]
        where = f"${key.variable}"
        if key.kind in _ITEM_PARSERS:
            parts = [item.strip() for item in value.replace("\n", ",").split(",") if item.strip()]
            parsed_items = [_ITEM_PARSERS[key.kind](part, where) for part in parts]
            for item in parsed_items:  # every item validated before any is judged
                if item not in lists[key.name]:
                    _refuse_widening(key, where, f"{item} is not in {path}", may_widen, path)
                    lists[key.name].append(item)
                    items[(key.name, item)] = where
        elif key.kind is Kind.FLAG and value == "":
            continue
        else:
            parsed = _SCALAR_PARSERS[key.kind](value.strip(), where)
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
    elif key.name == "local-model-port" and value not in (0, current):
        _refuse_widening(key, where, f"port {value} is not the file's", may_widen, path)
    elif key.name == "workspace-root" and current is not None:
        # Resolved: a link planted under the file's root must not lead the root elsewhere.
        value, current = os.path.realpath(str(value)), os.path.realpath(str(current))
        inside = value == current or value.startswith(current.rstrip("/") + "/")
        if not inside:
            _refuse_widening(key, where, f"{value} is outside the file's {current}",
                             may_widen, path)


def _parse_value(line: _Line) -> object:
    if line.value is None:
        return True
    parser = _SCALAR_PARSERS.get(line.key.kind) or _ITEM_PARSERS[line.key.kind]
    return parser(line.value, line.where)


def _dedupe(items: list[object]) -> tuple[object, ...]:
    return tuple(dict.fromkeys(items))


def _strings(items: list[object]) -> tuple[str, ...]:
    return tuple(str(item) for item in _dedupe(items))


def _assemble(
    scalars: dict[str, object],
    lists: dict[str, list[object]],
    origins: dict[str, str],
    items: dict[tuple[str, object], str],
) -> Config:
    local_ports = [int(str(port)) for port in lists["local-port"]]
    model_port = int(str(scalars.get("local-model-port", 0)))
    if model_port:
        local_ports.append(model_port)
    callback_ports = [int(str(port)) for port in lists["callback-port"]]
    both = sorted(set(local_ports) & set(callback_ports))
    if both:
        where = origins.get("callback-port", "configuration")
        raise SandboxError(
            f"{where}: port {both[0]} is both a local-port and a callback-port", EXIT_CONFIG
        )
    root = scalars.get("workspace-root")
    state_dir = scalars.get("state-dir")
    pids = scalars.get("max-pids")
    memory = scalars.get("max-memory")
    where_from = {
        str(value): where
        for (name, value), where in items.items()
        if name in ("allow-write", "allow-read", "allow-socket")
    }
    return Config(
        workspace_root=str(root) if root is not None else None,
        no_forge=bool(scalars.get("no-forge", False)),
        allow_write=_strings(lists["allow-write"]),
        pass_env=_strings(lists["pass-env"]),
        egress_jail=bool(scalars.get("egress-jail", True)),
        allow_ip=_strings(lists["allow-ip"]),
        local_ports=tuple(dict.fromkeys(local_ports)),
        callback_ports=tuple(dict.fromkeys(callback_ports)),
        hardening=str(scalars.get("hardening", "standard")),
        max_pids=int(str(pids)) if pids is not None else None,
        max_memory=int(str(memory)) if memory is not None else None,
        state_dir=str(state_dir) if state_dir is not None else None,
        protect=_strings(lists["protect"]),
        unprotect=_strings(lists["unprotect"]),
        allow_read=_strings(lists["allow-read"]),
        allow_socket=_strings(lists["allow-socket"]),
        env_may_widen=_strings(lists["env-may-widen"]),
        tmpfs_size=int(str(scalars.get("tmpfs-size", 1 << 30))),
        origins=MappingProxyType(dict(origins)),
        path_origins=MappingProxyType(where_from),
    )


def load(environ: Mapping[str, str], *, agent: str, agents: tuple[str, ...], path: str) -> Config:
    """Read `path` (absent means defaults) and parse it for `agent`."""
    return parse(read_file(path), environ, agent=agent, agents=agents, path=path)


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
# hardening = standard                   # or harsh; per agent: hardening.codex = harsh
# max-pids = 4096                        # cap processes
# max-memory = 8G                        # cap memory
"""
