"""Launch cost of each kernel layer, as a ratio to the same bwrap launch without it.

Not a test. Run as root or a normal user: `python3 bench/bench_layers.py [RUNS]`.
Each row is `bwrap ... /bin/true` with one more layer; `python -I` rows show
how much of `_enter` is the interpreter's own start-up.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from claude_sandbox import seccomp  # noqa: E402
from claude_sandbox.limits import KernelSettings, enter_argv  # noqa: E402

PYTHON = "/usr/bin/python3"
BASE = [
    "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--ro-bind", "/proc", "/proc",
    "--tmpfs", "/tmp", "--unshare-all", "--share-net", "--cap-drop", "ALL", "--die-with-parent",
]  # fmt: skip


def timed(argv: list[str], runs: int, with_filter: bool) -> float:
    samples = []
    for _ in range(runs):
        fd = seccomp.filter_fd("standard") if with_filter else -1
        cmd = [*argv[:len(BASE)], "--seccomp", str(fd), *argv[len(BASE):]] if with_filter else argv
        start = time.perf_counter()
        subprocess.run(cmd, pass_fds=[fd] if with_filter else [], check=True)
        samples.append(time.perf_counter() - start)
        if with_filter:
            os.close(fd)
    return statistics.median(samples) * 1000


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    work = tempfile.mkdtemp(dir="/var/tmp")
    boot = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); "
        "from claude_sandbox.__main__ import main; sys.exit(main())"
    )

    def enter(level: str) -> list[str]:
        settings = KernelSettings(level, writable=(work,))
        return [*BASE, "--bind", work, work, PYTHON, "-I", "-c", boot, "_enter",
                *enter_argv(settings), "--", "/bin/true"]  # fmt: skip

    rows = [
        ("bwrap /bin/true (floor)", [*BASE, "/bin/true"], False),
        ("+ seccomp (--seccomp FD)", [*BASE, "/bin/true"], True),
        ("bwrap python -I -c pass", [*BASE, PYTHON, "-I", "-c", "pass"], True),
        ("+ _enter standard", enter("standard"), True),
        ("+ _enter harsh", enter("harsh"), True),
    ]
    start = time.perf_counter()
    for _ in range(1000):
        seccomp.build_filter.__wrapped__("harsh")
    build_us = (time.perf_counter() - start) * 1000
    results = [(name, timed(argv, runs, f)) for name, argv, f in rows]
    floor, py = results[0][1], results[2][1]
    print(f"{'layer':32} {'median ms':>10} {'x floor':>8}")
    for name, ms in results:
        print(f"{name:32} {ms:10.2f} {ms / floor:8.2f}")
    print(f"build_filter (uncached): {build_us:.1f} us per call")
    print(f"_enter own cost over python start: standard {results[3][1] - py:.2f} ms, "
          f"harsh {results[4][1] - py:.2f} ms")  # fmt: skip
    os.rmdir(work)


if __name__ == "__main__":
    main()
