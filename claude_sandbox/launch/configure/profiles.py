"""Agent profiles: what each agent gets back inside the sandbox, as data.

Adding a fourth agent is a new row here, not a new code path: mounts.py reads
these fields and nothing else about an agent.
"""

from __future__ import annotations

from claude_sandbox.core.errors import EXIT_USAGE, SandboxError
from claude_sandbox.core.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


@record
class Import:
    """Something of the user's outer home copied into the agent's store (never back).

    `path` is relative to $HOME, a file or a directory; `skip` names paths
    inside that directory left out: transcripts, logs and caches that can be
    large and that nothing needs to log in or keep its settings.
    """

    path: str
    skip: tuple[str, ...] = ()


@record
class Profile:
    name: str
    # What a first launch copies from the outer home into the agent's one-way
    # state store (its home inside): the login and settings, nothing that flows back.
    imports: tuple[Import, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    add_args: tuple[str, ...] = ()
    strip_args: tuple[str, ...] = ()
    # A private scratch directory bound read-write, and the variable naming it.
    tmp_dir: str | None = None
    tmp_variable: str | None = None
    # Bind the real binary read-only at ~/.local/bin/NAME too (native-install checks).
    local_bin_alias: bool = False
    # Variables that carry the agent's credentials: held back like every other unless
    # the operator passes them, and the launch says so (one line) when one is set.
    credentials: tuple[str, ...] = ()
    # Arguments for which the agent answers at once (a version query): nothing is
    # injected then, or the agent's own fast path is lost.
    quick_args: tuple[tuple[str, ...], ...] = ()
    # Programs the agent starts without a shell (read from its package): under brokered
    # its own process may execute these where PATH finds them.
    direct_tools: tuple[str, ...] = ()


PROFILES: tuple[Profile, ...] = (
    Profile(
        name="claude",
        imports=(
            Import(".claude.json"),
            Import(
                ".claude",
                skip=("projects", "todos", "shell-snapshots", "statsig", "logs", "debug",
                      "file-history", "ide", "local", "session-env", "telemetry", "cache",
                      "paste-cache", "plans", "downloads"),
            ),
        ),
        env=(("DISABLE_AUTOUPDATER", "1"),),
        add_args=("--no-chrome",),
        strip_args=("--chrome",),
        tmp_dir="/var/tmp/claude-agent",
        tmp_variable="CLAUDE_CODE_TMPDIR",
        local_bin_alias=True,
        credentials=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),
        quick_args=(("--version",), ("-v",), ("-V",)),
    ),
    Profile(
        name="codex",
        imports=(
            Import(".codex", skip=("sessions", "archived_sessions", "log", "tmp", "packages",
                                   "cache", ".tmp")),
        ),
        credentials=("OPENAI_API_KEY", "CODEX_API_KEY"),
    ),
    Profile(
        name="pi",
        imports=(Import(".pi", skip=("agent/sessions",)),),
        credentials=("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"),
        direct_tools=("rg", "fd"),  # its grep and find tools
    ),
)
AGENT_NAMES: tuple[str, ...] = tuple(profile.name for profile in PROFILES)
# The shims in /usr/local/bin: one an agent, and the operator's command.
ENTRY_POINTS: tuple[str, ...] = (*AGENT_NAMES, "claude-sandbox")


def get(name: str) -> Profile:
    for profile in PROFILES:
        if profile.name == name:
            return profile
    raise SandboxError(f"unknown agent {name!r} (one of: {', '.join(AGENT_NAMES)})", EXIT_USAGE)


def agent_args(profile: Profile, args: tuple[str, ...]) -> tuple[str, ...]:
    """The agent's own arguments with the profile's stripped and injected ones."""
    kept = tuple(arg for arg in args if arg not in profile.strip_args)
    if kept in profile.quick_args:
        return kept
    added = tuple(arg for arg in profile.add_args if arg not in kept)
    return added + kept


def held_back(profile: Profile, environ: Mapping[str, str], passed: Sequence[str]) -> list[str]:
    """The agent's credential variables set here that the sandbox will not let through."""
    return [name for name in profile.credentials if environ.get(name) and name not in passed]
