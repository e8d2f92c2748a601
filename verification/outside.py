"""The numbered checks that can only be judged from outside the sandbox.

The verify runner calls these around the launch: 27 launches from places the
workspace check must refuse (they refuse before any namespace exists), 35
compares what existed before the launch with what is left after it.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

EXIT_REFUSED = 77
# Matched before any dot: pasta's process is named passt.avx2 (or passt.avx512)
# after the wrapper picks the build for this CPU.
WATCHED_COMMS = frozenset({"bwrap", "pasta", "passt", "unshare", "script", "socat"})


@dataclass(frozen=True, slots=True)
class Result:
    number: str
    outcome: str  # PASS / FAIL / SKIP
    detail: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    processes: frozenset[tuple[int, str]]
    mounts: frozenset[str]
    temp_entries: frozenset[str]


def _processes() -> frozenset[tuple[int, str]]:
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/comm", encoding="utf-8") as handle:
                    found.add((int(name), handle.read().strip()))
            except OSError:
                continue
    return frozenset(found)


def _temp_entries() -> frozenset[str]:
    entries = set()
    for base in ("/tmp", "/var/tmp", f"/run/user/{os.getuid()}"):
        try:
            entries |= {os.path.join(base, name) for name in os.listdir(base)}
        except OSError:
            continue
    return frozenset(entries)


def snapshot() -> Snapshot:
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        mounts = frozenset(line.split(" ")[4] for line in handle.read().splitlines())
    return Snapshot(_processes(), mounts, _temp_entries())


def check_35_no_leftovers(before: Snapshot, ignore: Sequence[str], settle: float = 3.0
                          ) -> Result:
    deadline = time.monotonic() + settle
    while True:
        after = snapshot()
        procs = sorted(f"{comm}[{pid}]" for pid, comm in after.processes - before.processes
                       if comm.partition(".")[0] in WATCHED_COMMS)
        temps = sorted(path for path in after.temp_entries - before.temp_entries
                       if path not in ignore and ("claude" in path or "csbx" in path))
        # Other launches on a shared host mount things too: only ours count.
        mounts = sorted(m for m in after.mounts - before.mounts
                        if "claude" in m or "csbx" in m or any(m.startswith(p) for p in ignore))
        if not (procs or temps or mounts) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    left = procs + temps + [f"mount {m}" for m in mounts]
    if left:
        return Result("35", "FAIL", f"left behind: {', '.join(left)}")
    return Result("35", "PASS", "no process, mount or temporary file left")


def check_27_workspace_refusal(shim: str, agent: str, home: str, workdir: str,
                               environ: Mapping[str, str]) -> Result:
    link = os.path.join(workdir, "home-link")
    if not os.path.lexists(link):
        os.symlink(home, link)
    places = {"/": "/", "$HOME": home, "/etc": "/etc", "a symlink to $HOME": link}
    accepted = []
    for label, cwd in places.items():
        result = subprocess.run([shim, "shell", "--agent", agent, "--", "/bin/true"], cwd=cwd,
                                env=dict(environ), capture_output=True, text=True, check=False,
                                stdin=subprocess.DEVNULL, timeout=60)
        if result.returncode != EXIT_REFUSED or "claude-sandbox:" not in result.stderr:
            accepted.append(f"{label} (exit {result.returncode})")
    os.unlink(link)
    if accepted:
        return Result("27", "FAIL", f"not refused: {', '.join(accepted)}")
    return Result("27", "PASS", f"refused: {', '.join(places)}")
