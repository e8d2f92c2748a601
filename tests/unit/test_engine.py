"""core/engine.py: which engine or host setting stops the sandbox, named with its fix and
its cost. The classification is pure; the probes run against the real kernel here (a
seccomp filter that refuses unshare, as Docker's default does) and, in
tests/image/test_docker_seccomp.py, under podman with Docker's own default profile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from claude_sandbox.core import engine
from claude_sandbox.core.record import replace

CLEAR = engine.EngineFacts(
    seccomp_refuses_unshare=False, apparmor="", apparmor_refuses_mount=None,
    max_user_namespaces=15000, unprivileged_userns_clone=None, apparmor_restricts_userns=None,
    gvisor=False, pod=False, uid=1000)


def test_a_clear_host_has_no_blocker() -> None:
    assert engine.blocker(CLEAR) is None
    assert engine.blocker(CLEAR, failed=True) is None


@pytest.mark.parametrize("change, words", [
    ({"gvisor": True}, ["gVisor", "--runtime runc"]),
    ({"max_user_namespaces": 0}, ["user.max_user_namespaces = 0", "sysctl -w"]),
    ({"unprivileged_userns_clone": 0}, ["kernel.unprivileged_userns_clone = 0"]),
    ({"seccomp_refuses_unshare": True},
     ["seccomp profile refuses unshare", "deploy/seccomp/make_profile.py",
      "--security-opt seccomp=FILE", "not seccomp=unconfined", "--cap-add SYS_ADMIN"]),
    ({"seccomp_refuses_unshare": True, "pod": True},
     ["seccompProfile of type Localhost", "deploy/seccomp/make_profile.py"]),
    ({"apparmor": "docker-default (enforce)", "apparmor_refuses_mount": True},
     ["AppArmor profile (docker-default) refuses mount", "apparmor=unconfined"]),
    ({"apparmor": "cri-containerd.apparmor.d (enforce)", "apparmor_refuses_mount": True,
      "pod": True}, ["appArmorProfile of type Unconfined"]),
])
def test_each_blocker_is_named_with_its_fix(change: dict[str, object], words: list[str]) -> None:
    why = engine.blocker(replace(CLEAR, **change))
    assert why is not None
    for word in words:
        assert word in why, (word, why)


def test_what_only_may_stop_it_is_named_only_after_a_failure() -> None:
    """Ubuntu's restriction leaves bwrap working where bwrap has its own AppArmor profile:
    it must not refuse a launch that would work, only explain one that failed."""
    restricted = replace(CLEAR, apparmor_restricts_userns=1)
    assert engine.blocker(restricted) is None
    why = str(engine.blocker(restricted, failed=True))
    assert "apparmor_restrict_unprivileged_userns" in why
    # The jail's holder makes its namespaces in the launcher's interpreter: a profile
    # must name that program, which the line says.
    assert os.path.realpath(sys.executable) in why and "unshare" not in why, why
    assert engine.blocker(replace(restricted, uid=0), failed=True) is None


def test_root_is_not_stopped_by_the_unprivileged_switch() -> None:
    assert engine.blocker(replace(CLEAR, unprivileged_userns_clone=0, uid=0)) is None


def test_an_engine_profile_that_allows_mount_is_no_blocker() -> None:
    assert engine.blocker(replace(CLEAR, apparmor="docker-default (enforce)",
                                  apparmor_refuses_mount=False)) is None


REFUSE_UNSHARE = """
import sys
sys.path.insert(0, sys.argv[1])
import pyseccomp as sc
f = sc.SyscallFilter(sc.ALLOW)
f.add_rule(sc.ERRNO(1), "unshare")
f.load()
from claude_sandbox.core import engine
facts = engine.read()
print(facts.seccomp_refuses_unshare)
print(engine.blocker(facts))
"""


def test_a_seccomp_filter_refusing_unshare_is_seen_for_what_it_is() -> None:
    """The probe, against the real kernel: unshare(0) is refused by the filter, and by
    nothing else (it unshares nothing)."""
    repo = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", REFUSE_UNSHARE, repo], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0] == "True", out
    assert "seccomp profile refuses unshare" in out[1]
    assert engine.read().seccomp_refuses_unshare is False  # this test process has no filter


def _children() -> set[int]:
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as handle:
            found.update(int(pid) for pid in handle.read().split())
    return found


def test_the_mount_probe_leaves_no_process_and_agrees_with_this_host() -> None:
    """Without AppArmor here the probe's child may make / private in its own namespace,
    and is reaped before the probe returns."""
    before = _children()
    assert engine._mount_refused() is False
    assert _children() <= before


def test_what_the_how_to_quotes_is_what_the_refusals_say() -> None:
    """docs/how-to/docker.md quotes doctor's lines for the engines the tests cannot run."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "docker.md").read_text()
    said = [
        engine.blocker(replace(CLEAR, seccomp_refuses_unshare=True)),
        engine.blocker(replace(CLEAR, apparmor="docker-default (enforce)",
                               apparmor_refuses_mount=True)),
        engine.blocker(replace(CLEAR, gvisor=True)),
    ]
    quoted = [line.split('says "', 1)[1].split('"', 1)[0] for line in text.splitlines()
              if line.startswith("| ") and 'says "' in line]
    assert len(quoted) == 3, quoted
    for quote in quoted:
        assert any(line is not None and quote in line for line in said), quote
