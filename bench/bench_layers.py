"""Launch cost of each kernel layer, as a ratio to the same bwrap launch without it.

Not a test. Run as root or a normal user: `python3 bench/bench_layers.py [RUNS]`.
Each row is `bwrap ... /bin/true` with one more layer; `python -I` rows show
how much of `_enter` is the interpreter's own start-up, and the compiled stage's row
(inside/enter.c, as the installer placed it) what the standard level costs without one.
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

from claude_sandbox.core import paths  # noqa: E402
from claude_sandbox.inside.spec import Inner, encode  # noqa: E402
from claude_sandbox.launch.planner import seccomp  # noqa: E402

PYTHON = "/usr/bin/python3"
BASE = [
    "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--ro-bind", "/proc", "/proc",
    "--tmpfs", "/tmp", "--unshare-all", "--share-net", "--cap-drop", "ALL", "--die-with-parent",
]  # fmt: skip


def _record(data: bytes) -> int:
    fd = os.memfd_create("inner", 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def timed(argv: list[str], runs: int, with_filter: bool, record: bytes = b"") -> float:
    """`record`: the inner record `_enter` reads; its descriptor replaces "RECORD" in argv."""
    samples = []
    for _ in range(runs):
        fd = seccomp.filter_fd("standard") if with_filter else -1
        inner = _record(record) if record else -1
        cmd = [str(inner) if arg == "RECORD" else arg for arg in argv]
        cmd = [*cmd[:len(BASE)], "--seccomp", str(fd), *cmd[len(BASE):]] if with_filter else cmd
        start = time.perf_counter()
        subprocess.run(cmd, pass_fds=[f for f in (fd, inner) if f >= 0], check=True)
        samples.append(time.perf_counter() - start)
        for opened in (fd, inner):
            if opened >= 0:
                os.close(opened)
    return statistics.median(samples) * 1000


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    work = tempfile.mkdtemp(dir="/var/tmp")
    boot = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); "
        "from claude_sandbox.__main__ import main; sys.exit(main())"
    )

    enter = [*BASE, "--bind", work, work, PYTHON, "-I", "-c", boot, "_enter", "RECORD"]

    def record(level: str) -> bytes:
        return encode(Inner(level, writable=(work,), command=("/bin/true",)), None)

    rows = [
        ("bwrap /bin/true (floor)", [*BASE, "/bin/true"], False, b""),
        ("+ seccomp (--seccomp FD)", [*BASE, "/bin/true"], True, b""),
        ("bwrap python -I -c pass", [*BASE, PYTHON, "-I", "-c", "pass"], True, b""),
        ("+ _enter standard", enter, True, record("standard")),
        ("+ _enter harsh", enter, True, record("harsh")),
    ]
    if os.path.exists(paths.ENTER_STAGE):
        rows.append(("+ enter (C) standard", [*BASE, "--bind", work, work, paths.ENTER_STAGE,
                                             "RECORD"], True, record("standard")))
    start = time.perf_counter()
    for _ in range(1000):
        seccomp.build_filter("harsh")
    build_us = (time.perf_counter() - start) * 1000
    results = [(name, timed(argv, runs, f, r)) for name, argv, f, r in rows]
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
