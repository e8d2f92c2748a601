"""Agent profiles: what each agent gets back inside the sandbox, as data.

Adding a fourth agent is a new row here, not a new code path: bwrap.py reads
these fields and nothing else about an agent.
"""

from __future__ import annotations

from .errors import EXIT_USAGE, SandboxError
from .record import record


@record
class StateFile:
    path: str  # relative to $HOME
    initial: str  # written when the file is absent, so the bind has a source


@record
class Profile:
    name: str
    description: str
    # Agent state bound back read-write under the $HOME mask; created 0700 when absent.
    state_dirs: tuple[str, ...]
    state_files: tuple[StateFile, ...] = ()
    # Re-masked with an empty tmpfs after the bulk binds that expose them, in every
    # profile (a codex session must not rewrite claude's binary cache either).
    masks: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    add_args: tuple[str, ...] = ()
    strip_args: tuple[str, ...] = ()
    # A private scratch directory bound read-write, and the variable naming it.
    tmp_dir: str | None = None
    tmp_variable: str | None = None
    # Bind the real binary read-only at ~/.local/bin/NAME too (native-install checks).
    local_bin_alias: bool = False


PROFILES: tuple[Profile, ...] = (
    Profile(
        name="claude",
        description="Claude Code (@anthropic-ai/claude-code)",
        state_dirs=(".claude",),
        state_files=(StateFile(".claude.json", "{}\n"),),
        # Its versioned binary cache: an agent that rewrote it would run unwrapped
        # next time from the outer shell.
        masks=(".local/share/claude",),
        env=(("DISABLE_AUTOUPDATER", "1"),),
        add_args=("--no-chrome",),
        strip_args=("--chrome",),
        tmp_dir="/var/tmp/claude-agent",
        tmp_variable="CLAUDE_CODE_TMPDIR",
        local_bin_alias=True,
    ),
    Profile(
        name="codex",
        description="OpenAI Codex CLI (@openai/codex)",
        state_dirs=(".codex",),
        # Its package cache (check 21): code there runs outside on the next launch.
        masks=(".codex/packages",),
    ),
    Profile(
        name="pi",
        description="Pi coding agent (@mariozechner/pi-coding-agent)",
        state_dirs=(".pi",),
    ),
)
AGENT_NAMES: tuple[str, ...] = tuple(profile.name for profile in PROFILES)


def get(name: str) -> Profile:
    for profile in PROFILES:
        if profile.name == name:
            return profile
    raise SandboxError(f"unknown agent {name!r} (one of: {', '.join(AGENT_NAMES)})", EXIT_USAGE)


def agent_args(profile: Profile, args: tuple[str, ...]) -> tuple[str, ...]:
    """The agent's own arguments with the profile's stripped and injected ones."""
    kept = tuple(arg for arg in args if arg not in profile.strip_args)
    added = tuple(arg for arg in profile.add_args if arg not in kept)
    return added + kept
