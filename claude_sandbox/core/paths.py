"""Fixed locations, and the only way the launch path finds an external tool.

The launch path never consults PATH (architecture.md, step 1): PATH is the caller's,
and an agent can write to directories on it. Tools come from this fixed list
of root-owned system directories instead.
"""

from __future__ import annotations

import os
import sys

from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

LIBEXEC = "/usr/libexec/claude-sandbox"
CORE_VENV = f"{LIBEXEC}/venv"
TOOLS_VENV = f"{LIBEXEC}/tools-venv"
# The installer points LIBEXEC/real/NAME at each agent's real binary, off PATH.
REAL_BIN_DIR = f"{LIBEXEC}/real"
# Agents the installer fetched from the npm registry live under this prefix.
AGENTS_PREFIX = f"{LIBEXEC}/agents"
# An empty root-owned file; inside the sandbox a read-only bind covers it.
# The mount is the nesting fact an outer environment cannot forge (architecture.md, step 2).
INSIDE_MARKER = f"{LIBEXEC}/inside"
# An empty root-owned file, 0444: what masked dotfiles read as. (/dev/null would
# not do: bwrap binds are nodev, so a bound device node cannot even be opened.)
EMPTY_FILE = f"{LIBEXEC}/empty"
# An empty root-owned directory, 0555: bound over outer processes' /proc entries.
EMPTY_DIR = f"{LIBEXEC}/empty-dir"
# Where a root launch's views are attached before bwrap binds them (core/unowned.py): an
# empty directory of its own, since EMPTY_DIR is a cover's source.
VIEWS_DIR = f"{LIBEXEC}/views"
CONFIG_FILE = "/etc/claude-sandbox.conf"
# Claude Code's managed-settings drop-in for unwrapped sessions only (integrity.py):
# inside the sandbox EMPTY_SETTINGS, an empty object, is bound over it, so a
# user's own hooks and MCP servers work there.
UNWRAPPED_SETTINGS = "/etc/claude-code/managed-settings.d/90-claude-sandbox-unwrapped.json"
EMPTY_SETTINGS = f"{LIBEXEC}/empty-settings.json"
# hardening = brokered (inside/broker.py): the command client, built from
# inside/command-client.c by the installer, and the directory a tmpfs covers inside
# for the command server's socket, which the agent's domain cannot write.
COMMAND_CLIENT = f"{LIBEXEC}/command-client"
# The inner stage of hardening = standard, built from inside/enter.c by the installer
# (docs/adr/0017-the-inner-stage-in-c.md); where it is missing, `_enter` in Python.
ENTER_STAGE = f"{LIBEXEC}/enter"
# The root-only walk's reader of directory times, built from launch/facts/dirtimes.c by
# the installer (docs/adr/0019-the-directory-times-in-c.md); where it is missing, the
# launch reads them in Python.
DIR_TIMES = f"{LIBEXEC}/dirtimes"
# What starts pasta and the outside relays tied to the launcher, built from jail/tie.c
# by the installer (docs/adr/0004-launch-cost.md); where it is missing, a fork does.
TIE = f"{LIBEXEC}/tie"
BROKER_DIR = f"{LIBEXEC}/broker"
BROKER_SOCKET = f"{BROKER_DIR}/command.sock"
# The shells the client stands in for under brokered, where they exist (resolved).
SHELLS = ("/bin/sh", "/bin/bash", "/bin/dash", "/bin/zsh", "/usr/bin/sh", "/usr/bin/bash",
          "/usr/bin/dash", "/usr/bin/zsh")
# The dynamic loaders an agent's own program needs EXECUTE on under brokered.
LOADERS = ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1")
# Codex's managed configuration, its top layer. Inside the sandbox a copy that also
# sets sandbox_mode = "danger-full-access" is bound over it (codexconfig.py).
CODEX_MANAGED_CONFIG = "/etc/codex/managed_config.toml"
GITCONFIG_INSIDE = "/etc/claude-gitconfig"
SHIM_DIR = "/usr/local/bin"

SYSTEM_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin")

# The address the agent's resolv.conf names in the egress jail. pasta answers
# DNS sent here (`--dns-forward`) and relays it to the container's real
# resolver, which on our machines sits inside 10/8 and is therefore blackholed
# (measured here). Link-local, so that without the /32 exception it falls under the
# unreachable 169.254/16 row, and outside the ranges clouds use for metadata.
DNS_FORWARDER = "169.254.1.53"

# The running interpreter, by absolute path: the shim names it, and the jail
# holder re-enters the core through it rather than through PATH.
INTERPRETER = sys.executable
# The directory holding this package: the core venv's site-packages.
PACKAGE_SITE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def under(path: str, top: str) -> bool:
    """Whether `path` is `top` or lies beneath it, by their text (both absolute and
    normal, as the launch resolves them): `/a/bc` is not under `/a/b`, and everything
    is under `/`. The one containment test of the package."""
    return path == top or path.startswith(top.rstrip("/") + "/")


def under_any(path: str, tops: Iterable[str]) -> bool:
    return any(under(path, top) for top in tops)


def sha256_hex(data: bytes) -> str:
    """SHA-256 of `data`, in hex, from the interpreter's own implementation: hashlib
    loads OpenSSL's libcrypto first, 4-11 ms of every launch for a name's hash."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]  # CPython <= 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found]  # 3.12+
        except ImportError:
            from hashlib import sha256
    return str(sha256(data).hexdigest())


def workspace_key(workspace: str) -> str:
    """The name a workspace's directories have in the user's stores (its overlays'
    uppers, its egress records): its last component, then a hash of the whole path,
    so two workspaces of the same name never share one."""
    digest = sha256_hex(workspace.encode("utf-8", "surrogateescape"))[:16]
    return f"{os.path.basename(workspace) or 'root'}-{digest}"


def internal_argv(command: str) -> list[str]:
    """How the core re-enters itself for an internal command (`_enter`, `_janitor`).

    Each runs in a fresh interpreter (`_enter` where the compiled inner stage is
    missing; the janitor's sweeper after a launcher that died). -S skips site (about
    5 ms, and the distribution's sitecustomize), and `-c` skips runpy's
    imports; the one directory site would add, the core venv's site-packages
    holding this package, is named instead. -I still ignores PYTHON*
    variables, the user's site directory and the current directory. The
    command's own arguments follow.
    """
    code = (
        f"import sys; sys.path.append({PACKAGE_SITE!r}); from claude_sandbox.__main__ "
        f"import main; sys.exit(main([{command!r}, *sys.argv[1:]]))"
    )
    return [INTERPRETER, "-I", "-S", "-c", code]

# The package of each tool whose name is not its package's.
_PACKAGES = {
    "bwrap": "bubblewrap",
    "unshare": "util-linux",
    "setpriv": "util-linux",
    "pasta": "passt",
    "sh": "dash",
    "iptables-restore": "iptables",
    "iptables-save": "iptables",
}


def which(name: str, directories: Sequence[str],
          seen_as: Callable[[str], str | None] = lambda directory: directory) -> str | None:
    """The one executable lookup: `directory/name` for the first of `directories` that
    holds an executable file `name`, or None.

    `seen_as(directory)` is where to look at that directory (for the inside's PATH:
    what the sandbox will show there; None where it shows nothing).
    """
    for directory in directories:
        visible = seen_as(directory)
        if visible is None:
            continue
        candidate = os.path.join(visible, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.join(directory, name)
    return None


def find_tool(name: str) -> str | None:
    """The absolute path of `name` in the system directories, or None."""
    return which(name, SYSTEM_DIRS)


def tool(name: str) -> str:
    """The absolute path of `name`, or a refusal naming the package to install."""
    found = find_tool(name)
    if found is None:
        package = _PACKAGES.get(name, name)
        raise SandboxError(
            f"{name} not found in {', '.join(SYSTEM_DIRS)}; install the {package} package",
            EXIT_UNAVAILABLE,
        )
    return found


def root_owned(path: str) -> bool:
    """Whether `path` (resolved) and every directory above it belong to root and are
    writable by neither group nor others: no one but root could have put it there."""
    current = os.path.realpath(path)
    while True:
        try:
            info = os.lstat(current)
        except OSError:
            return False
        if info.st_uid != 0 or info.st_mode & 0o022:  # S_IWGRP | S_IWOTH
            return False
        if current == "/":
            return True
        current = os.path.dirname(current)
