"""The late-mount helper, a fork of the launcher, keeps nothing the launcher inherited.

Check 102 proves it from outside for what lives while a session runs (the janitor, the
jail's processes); the helper ends before the session does, so it is proved here, on a
real fork.
"""

from __future__ import annotations

import pathlib
import resource
import subprocess
import sys

import pytest


@pytest.mark.skipif(resource.getrlimit(resource.RLIMIT_NOFILE)[1] <= 1500,
                    reason="the hard limit allows no descriptor at 1500")
def test_the_helper_keeps_nothing_the_launcher_inherited(tmp_path: pathlib.Path) -> None:
    """The late-mount helper, a fork of the launcher, holds its socket and the standard
    streams, never a descriptor the launcher inherited, also above a soft limit it was
    started under. Check 102 cannot see the helper: it ends before the session runs."""
    marker = tmp_path / "inherited"
    marker.write_text("the launcher's own\n")
    code = f"""
import os, resource, time
from claude_sandbox.launch.session import procmask
fd = os.open({str(marker)!r}, os.O_RDONLY)
os.set_inheritable(fd, True)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1501), hard))
os.dup2(fd, 1500, inheritable=True)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 1024), hard))
helper = procmask.start_helper()
time.sleep(0.3)  # it waits for the launcher's plan, holding what it kept
held = [os.stat(f"/proc/{{helper.pid}}/fd/{{n}}") for n in os.listdir(f"/proc/{{helper.pid}}/fd")]
mine = os.fstat(fd)
print(sum((st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino) for st in held), len(held))
procmask.stop(helper, close=True)
"""
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, timeout=30)
    assert ran.returncode == 0, ran.stderr
    leading, total = map(int, ran.stdout.split())
    assert leading == 0, f"the helper holds the launcher's inherited file ({ran.stdout})"
    assert total <= 4, ran.stdout  # 0, 1, 2 and its socket
