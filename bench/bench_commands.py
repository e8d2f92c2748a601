"""What one command costs under `hardening = brokered`, against a floor from the same run.

One brokered launch as USER whose agent is a Python loop: it times `bash -c true`
through the command client and the server (a fresh user, mount and pid namespace,
a fresh /proc and Landlock per command), then asks the server for one command that
times the same `bash -c true` run directly inside a command's sandbox: the floor,
with the same Python spawn on both sides. Target: at most 30 ms over the floor.

Run as root (the configuration is bound over /etc/claude-sandbox.conf in a private
mount namespace, as the tests do); not a test:

    flock /tmp/claude-sandbox-ns.lock python3 bench/bench_commands.py [--runs N] [--as USER]
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import statistics
import subprocess
import sys
import tempfile

SHIM = "/usr/local/bin/claude-sandbox"
TARGET_EXTRA = 30.0
TIMER = """
import json, subprocess, sys, time
def times(argv, runs):
    found = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True)
        found.append((time.perf_counter() - start) * 1000)
    return found
"""
AGENT = TIMER + """
runs = int(sys.argv[1])
times(["/bin/bash", "-c", "true"], 3)  # warm the page cache and the server
brokered = times(["/bin/bash", "-c", "true"], runs)
floor = subprocess.run(["/bin/sh", "-c", 'exec python3 -c "$0" "$1"', sys.argv[2], str(runs)],
                       capture_output=True, text=True, check=True).stdout
print(json.dumps({"brokered": brokered, "floor": json.loads(floor)}))
"""
FLOOR = TIMER + """
times(["/bin/bash", "-c", "true"], 3)
print(json.dumps(times(["/bin/bash", "-c", "true"], int(sys.argv[1]))))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--as", dest="user", default="sbxuser")
    options = parser.parse_args()
    if os.getuid() != 0:
        parser.error("run as root (it binds a configuration over /etc in its own namespace)")
    user = pwd.getpwnam(options.user)
    workspace = tempfile.mkdtemp(prefix="csbx-bench-commands-")
    os.chown(workspace, user.pw_uid, user.pw_gid)
    conf = os.path.join(workspace, ".conf")
    with open(conf, "w") as handle:
        handle.write("hardening = brokered\n")
    os.chmod(conf, 0o644)
    agent = os.path.join(workspace, "agent.py")
    with open(agent, "w") as handle:
        handle.write(AGENT)
    os.chmod(agent, 0o644)
    argv = ["unshare", "-m", "sh", "-c",
            f'mount --bind {conf} /etc/claude-sandbox.conf && exec "$@"', "sh",
            "setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
            SHIM, "shell", "--", "/usr/bin/python3", agent, str(options.runs), FLOOR]
    try:
        result = subprocess.run(argv, cwd=workspace, capture_output=True, text=True, check=False,
                                env={"PATH": "/usr/bin:/bin", "HOME": user.pw_dir})
    finally:
        subprocess.run(["rm", "-rf", workspace], check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        return 1
    found = json.loads(result.stdout.strip().splitlines()[-1])
    rows = {"floor: bash -c true in a command": found["floor"],
            "bash -c true through the server": found["brokered"]}
    print(f"{'':36} {'median ms':>10} {'p90 ms':>8}   ({options.runs} runs, as {user.pw_name})")
    for name, values in rows.items():
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"{name:36} {statistics.median(values):10.1f} {p90:8.1f}")
    extra = statistics.median(found["brokered"]) - statistics.median(found["floor"])
    verdict = "met" if extra <= TARGET_EXTRA else "NOT met"
    print(f"per-command overhead: {extra:.1f} ms (target <= {TARGET_EXTRA:.0f} ms: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
