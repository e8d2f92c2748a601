"""The configuration's values: one parser per kind of value, each naming where a bad one came from.

Every parser takes the text and `where` (FILE:LINE or the variable) and
returns the value or refuses the launch with EXIT_CONFIG.
"""

from __future__ import annotations

import os

from claude_sandbox.core.errors import EXIT_CONFIG, SandboxError
from claude_sandbox.inside.spec import LEVELS
from claude_sandbox.launch.configure.keys import KEYS_BY_NAME, Kind, KindOf, denied_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# Plain string tests, not regular expressions: `re` costs ms at every launch.
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_REST = _NAME_START | frozenset("0123456789")
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz-")
_AGENT_CHARS = _KEY_CHARS | frozenset("0123456789")
_SIZE_SCALE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def is_key(name: str) -> bool:
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


TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off"}


def _path(text: str, where: str) -> str:
    if not text.startswith("/"):
        raise SandboxError(f"{where}: {text!r} is not an absolute path", EXIT_CONFIG)
    if "\0" in text or "\n" in text:
        raise SandboxError(f"{where}: the path holds a control character", EXIT_CONFIG)
    return os.path.normpath(text)


def _flag(text: str, where: str) -> bool:
    lowered = text.lower()
    if lowered in TRUE:
        return True
    if lowered in FALSE:
        return False
    raise SandboxError(f"{where}: {text!r} is not a flag value (1 or 0)", EXIT_CONFIG)


def _name(text: str, where: str) -> str:
    if not text or text[0] not in _NAME_START or not set(text) <= _NAME_REST:
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
    if text not in LEVELS:
        raise SandboxError(f"{where}: {text!r} is not one of {', '.join(LEVELS)}", EXIT_CONFIG)
    return text


MODES = ("live", "review")


def _mode(text: str, where: str) -> str:
    if text not in MODES:
        raise SandboxError(f"{where}: {text!r} is not one of {', '.join(MODES)}", EXIT_CONFIG)
    return text


def _egress_policy(text: str, where: str) -> str:
    from claude_sandbox.jail.egresspolicy import MODES as POLICIES

    if text not in POLICIES:
        raise SandboxError(f"{where}: {text!r} is not one of {', '.join(POLICIES)}", EXIT_CONFIG)
    return text


def _domain(text: str, where: str) -> str:
    """An allow-domain value, checked whole (a preset's name too); kept as written."""
    from claude_sandbox.jail.egresspolicy import RuleError, parse_rule

    try:
        parse_rule(text)
    except RuleError as bad:
        raise SandboxError(f"{where}: allow-domain {bad}", EXIT_CONFIG) from None
    return text


def _credential(text: str, where: str) -> str:
    from claude_sandbox.launch.facts.credentials import parse_line

    parse_line(text, where)
    return " ".join(text.split())


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


SCALAR_PARSERS: dict[KindOf, Callable[[str, str], object]] = {
    Kind.PATH: _path,
    Kind.FLAG: _flag,
    Kind.PORT: lambda text, where: _port(text, where, zero_ok=True),
    Kind.LEVEL: _level,
    Kind.MODE: _mode,
    Kind.POLICY: _egress_policy,
    Kind.COUNT: _count,
    Kind.SIZE: _size,
}


ITEM_PARSERS: dict[KindOf, Callable[[str, str], object]] = {
    Kind.PATHS: _path,
    Kind.NAMES: _name,
    Kind.ADDRESSES: _address,
    Kind.PORTS: _port,
    Kind.KEYS: _key_name,
    Kind.RELPATHS: _relative_path,
    Kind.DOMAINS: _domain,
    Kind.CREDENTIALS: _credential,
}
