"""Run in a container with the image's tools interpreter: one agent, one prompt against
the local mock API, whose first answer asks for a command. Exit 0 when that command ran,
inside the sandbox, in a fresh workspace.

    /usr/libexec/claude-sandbox/tools-venv/bin/python tool_call.py AGENT
"""

from __future__ import annotations

import os
import pwd
import sys
import tempfile

from claude_sandbox.launch.session import state
from claude_sandbox.tools import agentrun, mockapi


def main(agent: str) -> int:
    user = pwd.getpwuid(os.getuid())
    workspace = tempfile.mkdtemp(prefix="csbx-toolcall-", dir="/tmp")
    marker = os.path.join(workspace, f"ran-{agent}")
    with mockapi.serve("csbx-toolcall", tool_command=f"touch {marker}") as api:
        if agent == "pi":
            # pi reads its providers from its home, which inside is its state store.
            root = state.store_root(None, user.pw_dir, user.pw_uid)
            home = state.ensure_home(root, "pi", user.pw_dir, (), user.pw_uid,
                                     default_root=True) or state.agent_home(root, "pi")
            agentrun.prepare_home("pi", api, home)
        result = agentrun.run_agent(
            agent, "run it", api=api, home=user.pw_dir, cwd=workspace,
            program=f"/usr/local/bin/{agent}",
            env={"CLAUDE_SANDBOX_EGRESS_JAIL": "0"}, timeout=150)
    if os.path.exists(marker):
        print(f"{agent}: the command ran inside the sandbox")
        return 0
    print(f"{agent}: no command ran (exit {result.returncode})\n{result.stdout[-2000:]}\n"
          f"{result.stderr[-2000:]}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
