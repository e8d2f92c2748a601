"""What the person asked for: an agent and its arguments, or a command (`shell`)."""

from __future__ import annotations

from claude_sandbox.core.record import record


@record
class Request:
    agent: str
    command: tuple[str, ...] | None  # None: the real agent with `args`
    args: tuple[str, ...]
