"""The configuration's keys: one row each, data in one place (docs/reference/configuration.md
is rendered from it), and the variable names pass-env never passes.
"""

from __future__ import annotations

from claude_sandbox.core.record import record


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
    LEVEL = KindOf("standard | harsh | brokered")
    COUNT = KindOf("positive integer")
    SIZE = KindOf("size in bytes, with an optional K, M or G suffix")
    KEYS = KindOf("list of key names")
    RELPATHS = KindOf("list of paths relative to the workspace")
    MODE = KindOf("live | review")
    POLICY = KindOf("allow-list | open | learn")
    DOMAINS = KindOf("list of NAME[:PORT], *.SUFFIX[:PORT] or @PRESET")
    CREDENTIALS = KindOf("list of VAR or VAR HOST[,HOST...]")


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
    Key("workspace-root",   "CLAUDE_SANDBOX_WORKSPACE_ROOT",   Kind.PATH,      "$PWD",
        "the writable root of the sandbox"),
    Key("no-forge",         "CLAUDE_SANDBOX_NO_FORGE",         Kind.FLAG,      "off",
        "no gh/glab config binds and no forge credential helpers in the gitconfig"),
    Key("allow-write",      "CLAUDE_SANDBOX_ALLOW_WRITE",      Kind.PATHS,     "(none)",
        "extra writable binds, applied after the masks they reach through"),
    Key("pass-env",         "CLAUDE_SANDBOX_PASS_ENV",         Kind.NAMES,     "(none)",
        "variables let through the cleared environment (names only; the deny-list applies)"),
    Key("egress-jail",      "CLAUDE_SANDBOX_EGRESS_JAIL",      Kind.FLAG,      "on",
        "the per-launch network namespace that reaches the internet but not private networks"),
    Key("allow-ip",         "CLAUDE_SANDBOX_ALLOW_IP",         Kind.ADDRESSES, "(none)",
        "single addresses reachable past the private-range blackholes"),
    Key("local-port",       "CLAUDE_SANDBOX_LOCAL_PORTS",      Kind.PORTS,     "(none)",
        "relay from inside the jail to the container's 127.0.0.1:PORT"),
    Key("local-model-port", "CLAUDE_SANDBOX_LOCAL_MODEL_PORT", Kind.PORT,      "0",
        "the same, for one local model server"),
    Key("callback-port",    "CLAUDE_SANDBOX_CALLBACK_PORTS",   Kind.PORTS,     "(none)",
        "relay from the container's 127.0.0.1:PORT into the jail (browser login callbacks)"),
    Key("workspace-mode",   "CLAUDE_SANDBOX_WORKSPACE_MODE",   Kind.MODE,      "live",
        "live: the agent writes the workspace; review: it writes an overlay, and nothing "
        "reaches the workspace until `claude-sandbox review` applies it (check 73); the "
        "environment may choose review, never live over the file's review", per_agent=True),
    # /etc only: no variable, the launching environment cannot set these.
    Key("env-may-widen",    None, Kind.KEYS,     "(none)",
        "keys whose variable may widen this file's value (by default the environment may "
        "only narrow it)"),
    Key("state-dir",        None, Kind.PATH,     "~/.local/state/claude-sandbox",
        "where each user's one-way agent state lives (the agents' homes); `~/` is the "
        "launching user's home"),
    Key("protect",          None, Kind.RELPATHS, "(none)",
        "another workspace control path, read-only inside (adds to the built-in list)"),
    Key("unprotect",        None, Kind.RELPATHS, "(none)",
        "a built-in workspace control path to leave writable"),
    Key("allow-read",       None, Kind.PATHS,    "(none)",
        "paths outside the system trees shown read-only at the same place (a package "
        "cache, a toolchain); never a home, its dot entries or the state store (check 72)"),
    Key("allow-socket",     None, Kind.PATHS,    "(none)",
        "unix sockets (or directories of them) outside the workspace the sandbox may connect to"),
    Key("tmpfs-size",       None, Kind.SIZE,     "1G",
        "the size of each private tmpfs (/tmp, /run, /var/tmp, /dev/shm)", per_agent=True),
    Key("hardening",        None, Kind.LEVEL,    "standard",
        "kernel layers: standard; harsh (no nested user namespaces, no exec where writable); "
        "brokered (the agent's commands run through a command server, each in a sandbox "
        "of its own; the agent itself executes nothing else, nor anything it writes)",
        per_agent=True),
    Key("agent-exec",       None, Kind.PATHS,    "(none)",
        "under brokered: a program (or a directory of them) the agent itself may execute, "
        "not only through the command server: git, an MCP server"),
    Key("offline-commands", None, Kind.FLAG,     "off",
        "under brokered: each command gets a network namespace of its own, with no network"),
    Key("egress-policy",    None, Kind.POLICY,   "allow-list",
        "the egress proxy: allow-list (only allow-domain names, checks 75-80); open (every "
        "public name, each connection recorded); learn (open, and the session ends with the "
        "allow-domain lines that would have allowed it)", per_agent=True),
    Key("allow-domain",     None, Kind.DOMAINS,  "@AGENT, registries, forges",
        "a name the agent may reach: NAME or *.SUFFIX for ports 80 and 443, NAME:PORT for "
        "exactly that port (any TCP), @PRESET for a named list; with no @PRESET line the "
        "defaults (the agent's own hosts, the registries, the forges) apply as well",
        per_agent=True),
    Key("allow-vsock",      None, Kind.FLAG,     "off",
        "AF_VSOCK sockets (a VM's host services) allowed; by default the seccomp filter "
        "refuses them at every level, since no network namespace contains them (check 88)"),
    Key("credential",       None, Kind.CREDENTIALS, "GH_TOKEN, GITHUB_TOKEN, GITLAB_TOKEN, "
        "ANTHROPIC_API_KEY, OPENAI_API_KEY (their hosts)",
        "a credential the agent holds only as a sentinel: the egress proxy puts the real "
        "value back for these hosts only (checks 83-87); `VAR` alone names a built-in's "
        "hosts. A variable is brokered when a line declares it and it is set here (pass-env "
        "passes the real value); the forge files' tokens always are"),
    Key("max-pids",         None, Kind.COUNT,    "(no cap)",
        "the most processes the sandbox may hold", per_agent=True),
    Key("max-memory",       None, Kind.SIZE,     "(no cap)",
        "the most memory the sandbox may use", per_agent=True),
)  # fmt: skip


KEYS_BY_NAME = {key.name: key for key in KEYS}


# Variables pass-env may never name: they redirect loaders, interpreters, shells
# or git, carry the sandbox's own identity, or reach the outer desktop and IDE.
DENIED_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TMPDIR",
    "IS_SANDBOX", "IS_SANDBOX_AGENT", "CLAUDE_CODE_TMPDIR",
    "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH",
    "NODE_OPTIONS", "NODE_PATH", "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYOPT", "RUBYLIB",
    "GIT_DIR", "GIT_WORK_TREE", "GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS",
    "SSH_ASKPASS", "SSH_AUTH_SOCK", "GPG_AGENT_INFO",
    "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR",
    "VSCODE_IPC_HOOK_CLI", "VSCODE_GIT_IPC_HANDLE", "BROWSER",
})  # fmt: skip


# The locale's own categories (glibc's) pass through; any other LC_ name needs pass-env
# (a terminal's LC_TERMINAL, or anything a parent process chose to call LC_).
LOCALE = frozenset({"LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "LC_MONETARY",
                    "LC_MESSAGES", "LC_PAPER", "LC_NAME", "LC_ADDRESS", "LC_TELEPHONE",
                    "LC_MEASUREMENT", "LC_IDENTIFICATION"})


DENIED_PREFIXES = ("LD_", "PYTHON", "GIT_CONFIG", "CLAUDE_SANDBOX_", "BASH_FUNC_", "DYLD_")


def denied_reason(name: str) -> str | None:
    """Why pass-env may not name `name`, or None when it may."""
    if name in DENIED_NAMES:
        return f"{name} is on the pass-env deny-list"
    for prefix in DENIED_PREFIXES:
        if name.startswith(prefix):
            return f"{name} is on the pass-env deny-list ({prefix}*)"
    return None
