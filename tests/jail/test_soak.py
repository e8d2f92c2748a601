"""Many jailed launches, two at a time, with and without signals: nothing leaks.

CLAUDE_SANDBOX_SOAK sets the number of launches per round (default 20; the
acceptance run uses 200). Leak checks look only at what these launches
started: their private directories, and any process whose command line
names one (pasta's pid file, the relays' sockets) or whose pid they reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import jail_available, processes_naming

pytestmark = [
    pytest.mark.jail,
    pytest.mark.slow,
    pytest.mark.skipif(jail_available() is not None, reason=str(jail_available())),
]

COUNT = int(os.environ.get("CLAUDE_SANDBOX_SOAK", "20"))

LAUNCHER = """
import json, sys
from claude_sandbox.jail import session as jail
from claude_sandbox.jail.spec import JailSpec
j = jail.start(JailSpec((), (), (sys.argv[2:3] and (int(sys.argv[2]),)) or ()))
print(json.dumps({"dir": j.private_dir, "holder": j.started["holder"]}), flush=True)
rc = j.run(["/bin/sh", "-c", sys.argv[1]], {"PATH": "/usr/bin:/bin"})
print(json.dumps({"rc": rc, "started": j.started}), flush=True)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _one(index: int, signum: int | None, latest: float = 0.3
         ) -> tuple[int, str, dict[str, int]]:
    command = "sleep 2" if signum else "true"
    port = str(20000 + index % 20000) if index % 5 == 0 else ""
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, command, *([port] if port else [])],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own group: a simulated Ctrl-C hits only this launch
        text=True,
    )
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline() or "{}")
    if signum is not None:
        time.sleep(random.uniform(0, latest))
        if signum == signal.SIGKILL:
            # The agent is killed, not the launcher: its pid is the holder's
            # (test_jail.py kills the launcher itself).
            with contextlib.suppress(ProcessLookupError):
                os.kill(first["holder"], signal.SIGKILL)
        elif signum == signal.SIGINT:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does to the foreground group
        else:
            os.kill(proc.pid, signum)
    out, _ = proc.communicate(timeout=60)
    last = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    return proc.returncode, first.get("dir", ""), last.get("started", {})


def _soak(signals: list[int | None], latest: float = 0.3) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_one, range(len(signals)), signals, [latest] * len(signals)))
    for (rc, private_dir, started), signum in zip(results, signals, strict=True):
        assert private_dir, f"launch with {signum} reported no private dir"
        assert rc == 0, f"launcher failed with {signum}: {rc}"
        assert not os.path.exists(private_dir), f"{private_dir} left behind"
        assert not processes_naming(private_dir), f"process naming {private_dir} left"
        for name, pid in started.items():
            assert not _alive(pid), f"{name} {pid} left after {signum}"


def test_many_launches_two_at_a_time() -> None:
    _soak([None] * COUNT)


def test_many_launches_with_signals_at_random_moments() -> None:
    choices = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL]
    _soak([random.choice(choices) for _ in range(COUNT)])


def test_ctrl_c_while_pasta_attaches() -> None:
    """Ctrl-C reaches the launcher's whole group while pasta is still attaching:
    pasta must not die of it, and an ending holder must read as the signal, not
    as "pasta failed" (a launch's set-up, interrupted, is not a jail error)."""
    _soak([signal.SIGINT] * max(COUNT // 4, 10), latest=0.005)
