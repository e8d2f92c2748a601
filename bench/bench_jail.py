"""Jailed launch cost against its floor, measured in one run (not a test).

floor:  `unshare -rn` holder + pasta attach with the jail's own flags + bwrap
        /bin/true in that namespace, pasta ended afterwards;
jailed: jail.start() + run() of the same bwrap /bin/true.
Also reports the resident memory of what stays up for a session: the waiting
parent (this process), pasta and a relay pair.

    flock /tmp/claude-sandbox-ns.lock python bench/bench_jail.py [RUNS]
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from claude_sandbox.core import paths
from claude_sandbox.jail import session as jail
from claude_sandbox.jail import start as jail_start
from claude_sandbox.jail.spec import JailSpec

BWRAP = [
    paths.tool("bwrap"),
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "/bin/true",
]
ROOT = ["--runas", "0:0"] if os.geteuid() == 0 else []


def floor_once(tmp: str) -> float:
    start = time.perf_counter()
    holder = subprocess.Popen(
        [paths.tool("unshare"), "--user", "--map-root-user", "--net", "/bin/sleep", "30"]
    )
    mine = os.readlink("/proc/self/ns/net")
    while os.readlink(f"/proc/{holder.pid}/ns/net") == mine or os.readlink(
        f"/proc/{holder.pid}/exe"
    ) != os.path.realpath("/bin/sleep"):
        time.sleep(0.0002)
    pidfile = os.path.join(tmp, "pasta.pid")
    subprocess.run(
        [paths.tool("pasta"), *jail_start.PASTA_FLAGS, *ROOT, "-P", pidfile, str(holder.pid)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    subprocess.run(
        [paths.tool("nsenter"), "-U", "-n", "--preserve-credentials", "-t", str(holder.pid),
         *BWRAP],
        check=True,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    with open(pidfile) as f:
        os.kill(int(f.read()), signal.SIGKILL)
    os.unlink(pidfile)
    holder.kill()
    holder.wait()
    return elapsed


def jailed_once() -> float:
    start = time.perf_counter()
    j = jail.start(JailSpec((), (), ()))
    status = j.run(BWRAP, {"PATH": "/usr/bin:/bin"})
    assert status == 0
    return time.perf_counter() - start


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def resident() -> dict[str, int]:
    """RSS of the parent, pasta and a relay pair while a session runs."""
    probe = os.path.join(tempfile.mkdtemp(), "rss")
    j = jail.start(JailSpec((), (18999,), ()))
    # The session itself reports once everything is up, then waits.
    argv = ["/bin/sh", "-c", f"touch {probe}; sleep 1"]
    figures: dict[str, int] = {}

    def sample() -> None:
        figures["parent"] = rss_kib(os.getpid())
        for name, pid in j.started.items():
            if name != "holder":
                figures[name] = rss_kib(pid)

    import threading

    def watch() -> None:
        while not os.path.exists(probe):
            time.sleep(0.01)
        sample()

    t = threading.Thread(target=watch)
    t.start()
    j.run(argv, {"PATH": "/usr/bin:/bin"})
    t.join()
    os.unlink(probe)
    return figures


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    tmp = tempfile.mkdtemp()
    floor, jailed = [], []
    for _ in range(runs):  # interleaved, so machine noise hits both alike
        floor.append(floor_once(tmp))
        jailed.append(jailed_once())
    f, j = statistics.median(floor) * 1000, statistics.median(jailed) * 1000
    print(f"floor  (unshare -rn + pasta attach + bwrap /bin/true): median {f:.1f} ms, "
          f"min {min(floor) * 1000:.1f} ms")  # fmt: skip
    print(f"jailed (jail.start + run, bwrap /bin/true):            median {j:.1f} ms, "
          f"min {min(jailed) * 1000:.1f} ms")  # fmt: skip
    print(f"ratio  median {j / f:.2f}  (target <= 1.20)")
    for name, kib in resident().items():
        print(f"resident {name}: {kib} KiB")


if __name__ == "__main__":
    main()
