"""The janitor of a SIGKILLed launcher ends what is left in the launch's cgroups.

A process whose parent-death signal was lost (the kernel clears it when the
process's credentials change, before bwrap arms it again) would outlive its
dead launcher; the soak in test_signals.py met one. Here a process stands in for
it: in the launch's cgroup, tied to nothing, it must die when the janitor sweeps.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from claude_sandbox.launch.session import cgroups, janitor

pytestmark = pytest.mark.integration


def test_the_janitor_kills_what_is_left_in_the_cgroups() -> None:
    facts = cgroups.probe_cgroups()
    base = facts.v2 or facts.v1_pids
    if not base:
        pytest.skip("no writable cgroup directory here")
    directory = os.path.join(base, f"csbx-janitor-test-{os.getpid()}")
    os.mkdir(directory)
    stray = subprocess.Popen(["sleep", "60"])
    try:
        with open(os.path.join(directory, "cgroup.procs"), "w") as handle:
            handle.write(str(stray.pid))
        dead = 2 ** 22 + 1  # above pid_max's default: no such launcher
        janitor.sweep(dead, [["cgroup", directory]])
        assert stray.wait(timeout=10) == -9
        assert not os.path.exists(directory)
    finally:
        if stray.poll() is None:
            stray.kill()
            stray.wait()
        if os.path.isdir(directory):
            os.rmdir(directory)
