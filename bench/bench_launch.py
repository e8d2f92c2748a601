"""Whole-launch cost through the installed shim, against the floors, in one run (not a test).

Rows, each the median of RUNS interleaved runs of the same `/bin/true`:
  bwrap floor      bwrap --ro-bind / / --dev /dev --proc /proc /bin/true
  python floor     the core interpreter, -I -c pass
  launch, no jail  claude-sandbox shell -- /bin/true with egress-jail off
  jail floor       unshare -rn holder + pasta attach (the jail's flags) + bwrap /bin/true
  launch, jailed   claude-sandbox shell -- /bin/true (the default)
The first targets (ADR 0004): no jail <= bwrap floor + 15 ms; jailed <= 1.2 x jail floor.

    flock /tmp/claude-sandbox-ns.lock python bench/bench_launch.py [RUNS]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import bench_jail

SHIM = "/usr/local/bin/claude-sandbox"
CORE_PYTHON = "/usr/libexec/claude-sandbox/venv/bin/python"
BWRAP_FLOOR = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "/bin/true"]


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.path.expanduser("~"),
            "LANG": "C.UTF-8"}
    off = {**base, "CLAUDE_SANDBOX_EGRESS_JAIL": "0"}
    rows: dict[str, list[float]] = {name: [] for name in (
        "bwrap floor", "python floor", "launch, no jail", "jail floor", "launch, jailed")}
    workspace = tempfile.mkdtemp(prefix="cs-bench-")
    os.chdir(workspace)
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(runs):
            rows["bwrap floor"].append(_timed(BWRAP_FLOOR, base))
            rows["python floor"].append(_timed([CORE_PYTHON, "-I", "-c", "pass"], base))
            rows["launch, no jail"].append(_timed([SHIM, "shell", "--", "/bin/true"], off))
            rows["jail floor"].append(1000 * bench_jail.floor_once(tmp))
            rows["launch, jailed"].append(_timed([SHIM, "shell", "--", "/bin/true"], base))
    os.rmdir(workspace)
    median = {name: statistics.median(values) for name, values in rows.items()}
    print(f"{'row':<18}{'median ms':>10}{'min ms':>9}")
    for name, values in rows.items():
        print(f"{name:<18}{median[name]:>10.1f}{min(values):>9.1f}")
    extra = median["launch, no jail"] - median["bwrap floor"]
    ratio = median["launch, jailed"] / median["jail floor"]
    print(f"no jail: bwrap floor + {extra:.1f} ms (target + 15 ms)")
    print(f"jailed: {ratio:.2f} x the jail floor (target 1.2)")


if __name__ == "__main__":
    main()
