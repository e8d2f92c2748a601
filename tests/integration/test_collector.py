"""The launcher sets up with the cyclic garbage collector off, and collects again once the
session has ended (__main__.py, launch/steps.py; docs/adr/0004-launch-cost.md)."""

from __future__ import annotations

import json
import os

import pytest

from .conftest import Launcher

pytestmark = pytest.mark.integration

CORE_VENV = "/usr/libexec/claude-sandbox/venv"

# The shim's own code, with the collector watched: every pass notes how many objects were
# frozen when it began (none before the launch freezes what it set up), and the launch's
# last step (os._exit) writes what it saw to REPORT.
WATCHED = """
import gc, json, os, sys
sys.path.append('{venv}/lib/python%d.%d/site-packages' % sys.version_info[:2])
from claude_sandbox.__main__ import main
passes = []
gc.callbacks.append(lambda phase, info: phase == 'start' and passes.append(gc.get_freeze_count()))
real_exit = os._exit
def leave(status):
    with open({report!r}, 'w') as out:
        json.dump({{'enabled': gc.isenabled(), 'frozen': gc.get_freeze_count(),
                   'passes': passes}}, out)
    real_exit(status)
os._exit = leave
gc.collect()  # the count starts from nothing: no pass is due before the launch begins
passes.clear()
sys.exit(main(sys.argv[1:]))
"""


def test_the_launcher_collects_nothing_while_it_sets_up_and_again_after_the_session(
        launcher: Launcher) -> None:
    report = os.path.join(launcher.workspace, "collector.json")
    code = WATCHED.format(venv=CORE_VENV, report=report)
    result = launcher.run([f"{CORE_VENV}/bin/python", "-I", "-S", "-c", code,
                           "shell", "--", "/bin/true"])
    assert result.returncode == 0, result.stderr
    with open(report) as handle:
        seen = json.load(handle)
    # Back on for the workspace's exit, which makes as much as the workspace holds.
    assert seen["enabled"] is True
    # What the set-up made is frozen, never walked again.
    assert seen["frozen"] > 1000
    # No pass before the freeze: the set-up ran without one.
    assert [frozen for frozen in seen["passes"] if frozen == 0] == []
