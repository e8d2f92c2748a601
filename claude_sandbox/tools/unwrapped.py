"""Check 54's outside half: the real agents, started outside, run none of the plants.

The inside half (verification/test_checks.py) tried to write, in the workspace, what
an agent would leave for programs outside: project hooks and MCP servers, codex and
pi project configuration, git hooks and fsmonitor, VS Code tasks, dev-container
commands, .envrc. Each would leave a marker file if it ran. Here the runner starts
the real claude, codex and pi unwrapped, in that workspace, against a local mock of
their model APIs, and git as a shell prompt would, then looks for markers.

Each agent gets a fresh $HOME: the outer home cannot hold a plant (check 40 proves
it), and a verify run must not leave transcripts in the user's own. Codex reads a
project's .codex/config.toml only for a trusted project, so the fresh home trusts the
workspace: a plant there would run. Claude Code meets the prompt gate; what would run
before the gate (SessionStart hooks, MCP servers, helper programs) is what is tested.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from claude_sandbox.core import paths
from claude_sandbox.launch.configure import profiles
from claude_sandbox.tools import agentrun, mockapi

AGENTS = profiles.AGENT_NAMES


@dataclass(frozen=True, slots=True)
class Outcome:
    outcome: str  # PASS / FAIL / SKIP
    detail: str


def _trust(home: str, workspace: str) -> None:
    os.makedirs(os.path.join(home, ".codex"), exist_ok=True)
    with open(os.path.join(home, ".codex", "config.toml"), "a", encoding="utf-8") as handle:
        handle.write(f'\n[projects."{workspace}"]\ntrust_level = "trusted"\n')


def run_all(workspace: str, markers: str, agents: Sequence[str] = AGENTS,
            timeout: float = 120) -> Outcome:
    """Start each installed agent unwrapped in `workspace`; FAIL if any marker appears."""
    ran = []
    with mockapi.serve("csbx-verify") as api:
        for agent in agents:
            if not agentrun.is_installed(agent):
                continue
            home = tempfile.mkdtemp(prefix=f"csbx-unwrapped-{agent}-")
            try:
                if agent == "codex":
                    _trust(home, workspace)
                try:
                    agentrun.run_agent(agent, "hello", api=api, home=home, cwd=workspace,
                                       timeout=timeout)
                except subprocess.TimeoutExpired:
                    pass  # a gated or stalled session still ran whatever it would start
                ran.append(agent)
            finally:
                shutil.rmtree(home, ignore_errors=True)
    git = paths.which("git", ("/usr/bin", "/bin"))
    if git:
        subprocess.run([git, "-C", workspace, "status", "--short"], capture_output=True,
                       check=False, timeout=60, env={"PATH": "/usr/bin:/bin",
                                                     "HOME": workspace})
        ran.append("git status")
    fired = sorted(os.listdir(markers)) if os.path.isdir(markers) else []
    if fired:
        return Outcome("FAIL", f"ran outside: {', '.join(fired)}")
    if not ran:
        return Outcome("SKIP", "no agent installed to start outside")
    return Outcome("PASS", f"plants made inside; started outside in the workspace: "
                   f"{', '.join(ran)}; none of them ran a plant")
