"""The kernel layers on the real kernel: seccomp, Landlock, caps (issue 4, checks 23-25).

Run as root: `flock /tmp/claude-sandbox-ns.lock pytest -m kernel tests/kernel`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid

import pytest
from conftest import USER, Sandbox

from claude_sandbox.core import kernel
from claude_sandbox.inside import landlock
from claude_sandbox.inside.spec import Inner
from claude_sandbox.launch.planner import limits
from claude_sandbox.launch.session import cgroups

pytestmark = pytest.mark.kernel

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "bpf",
    "perf_event_open", "keyctl", "add_key", "request_key", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "open_by_handle_at", "ioctl_TIOCSTI",
    "ioctl_TIOCSTI_junk", "ioctl_TIOCLINUX", "ioctl_TIOCLINUX_junk",
)  # fmt: skip
# Without the filter these answer something other than EPERM, so the filter,
# not a missing capability, is what the EPERM proves.
# (Module, kexec and bpf calls may answer EPERM for want of a capability.)
PROVEN_BY_FILTER = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "perf_event_open",
    "keyctl", "add_key", "request_key", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "open_by_handle_at", "ioctl_TIOCSTI", "ioctl_TIOCSTI_junk",
    "ioctl_TIOCLINUX", "ioctl_TIOCLINUX_junk",
)  # fmt: skip


def require_abi(minimum: int) -> None:
    abi = landlock.abi_version()
    if abi < minimum:
        pytest.skip(f"kernel Landlock ABI {abi} < {minimum}: a fact of this kernel")


@pytest.mark.parametrize("level", ["standard", "harsh"])
def test_errno_matrix(sandbox: Sandbox, level: str) -> None:
    got = sandbox.probe("errnos", level=level).json()
    baseline = sandbox.probe("errnos", enter=False, with_filter=False).json()
    wrong = {name: got[name] for name in DENIED if got[name] != "EPERM"}
    assert not wrong, wrong
    assert got["getpid"] == "ok"
    assert got["ioctl_TIOCGWINSZ"] != "EPERM"  # only the two requests are refused
    unproven = [n for n in PROVEN_BY_FILTER if baseline[n] == "EPERM"]
    assert not unproven, f"these answer EPERM even without the filter: {unproven}"
    if level == "standard":
        assert got["unshare_newuser"] is True
        assert got["clone3"] != "ENOSYS"
    else:
        assert got["unshare_newuser"] is False
        assert got["clone3"] == "ENOSYS"


@pytest.mark.parametrize("call", ["int80", "x32"])
def test_foreign_abi_is_killed(sandbox: Sandbox, call: str) -> None:
    result = sandbox.probe(call)
    assert "before" in result.stdout
    assert "survived" not in result.stdout, result.stdout
    assert result.returncode != 0
    # Control: without the filter the same call runs, so the kill is the filter's.
    control = sandbox.probe(call, enter=False, with_filter=False)
    assert "survived" in control.stdout, control.stderr


@pytest.mark.parametrize("level", ["standard", "harsh"])
def test_ordinary_work_runs(sandbox: Sandbox, level: str) -> None:
    script = (
        "set -e; git --version; git init -q repo; cd repo; echo hi > f; git add f;"
        " git -c user.email=a@b -c user.name=t commit -qm one; git log --oneline | wc -l;"
        " node -e 'console.log(6*7)'; python3 -c 'print(\"py\")';"
        " printf 'int main(void){return 0;}' > t.c; gcc -o t t.c; npm --version;"
        " npm config list >/dev/null; echo done"
    )
    result = sandbox.run(["/bin/sh", "-c", script], level=level, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "42" in result.stdout and "py" in result.stdout and "done" in result.stdout


def test_harsh_denies_exec_where_writable(sandbox: Sandbox) -> None:
    target = sandbox.work / "mytrue"
    shutil.copy("/bin/true", target)
    if sandbox.user != "root":
        shutil.chown(target, USER, USER)
    harsh = sandbox.run([str(target)], level="harsh")
    assert harsh.returncode != 0
    assert "Permission denied" in harsh.stderr
    # The agent's own binary bound inside a writable tree still runs (exec_files).
    settings = Inner("harsh", writable=(str(sandbox.work),), exec_files=(str(target),))
    assert sandbox.run([str(target)], settings=settings).returncode != 0  # rw mount: refused
    assert sandbox.run([str(target)], level="standard").returncode == 0
    compiled = sandbox.run(
        ["/bin/sh", "-c", "printf 'int main(void){return 0;}' > c.c && gcc -o c c.c && ./c"],
        level="harsh",
    )
    assert compiled.returncode != 0 and "Permission denied" in compiled.stderr


# Nested user namespaces need a writable /proc/self/uid_map: with the outer
# /proc bound read-only (ADR 0000 §4) `unshare -r` fails with EROFS
# whatever our layers say, so these tests give the sandbox a fresh procfs to
# isolate what seccomp and Landlock decide. (Reported to the launch core.)
def _nested_userns_baseline(sandbox: Sandbox, argv: list[str]) -> None:
    # As root with --cap-drop ALL the nested uid_map write fails with EPERM
    # even with no layer of ours; our layers can only be judged where it works.
    control = sandbox.run(argv, enter=False, with_filter=False, fresh_proc=True, timeout=120)
    if control.returncode != 0:
        pytest.skip(f"nested user namespaces fail without our layers as {sandbox.user}: "
                    f"{control.stderr.strip()[-200:]}")  # fmt: skip


def test_standard_allows_nested_user_namespaces(sandbox: Sandbox) -> None:
    _nested_userns_baseline(sandbox, ["/usr/bin/unshare", "-r", "true"])
    ok = sandbox.run(["/usr/bin/unshare", "-r", "true"], fresh_proc=True)
    assert ok.returncode == 0, ok.stderr
    denied = sandbox.run(["/usr/bin/unshare", "-r", "true"], level="harsh", fresh_proc=True)
    assert denied.returncode != 0
    assert "Operation not permitted" in denied.stderr


def test_codex_sandbox_runs_inside_standard(sandbox: Sandbox) -> None:
    codex = "/usr/libexec/claude-sandbox/agents/bin/codex"
    if not os.path.exists(codex):
        pytest.skip(f"{codex} is not installed on this host")
    _nested_userns_baseline(sandbox, [codex, "sandbox", "--", "/bin/true"])
    result = sandbox.run([codex, "sandbox", "--", "/bin/true"], timeout=120, fresh_proc=True)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("stage", ["python", "c"])
def test_landlock_blocks_signal_to_visible_outside_pid(sandbox: Sandbox, stage: str) -> None:
    require_abi(landlock.SCOPE_ABI)
    preexec = None
    if sandbox.user != "root":
        uid = int(subprocess.check_output(["id", "-u", USER]))

        def preexec() -> None:
            os.setgid(uid)
            os.setuid(uid)

    victim = subprocess.Popen(["sleep", "60"], preexec_fn=preexec)
    try:
        result = sandbox.probe("kill", str(victim.pid), share_pid=True, stage=stage).json()
        assert result["kill"] == "EPERM"
        assert victim.poll() is None
        # Control: the same sandbox without `_enter` can signal it.
        control = sandbox.probe("kill", str(victim.pid), share_pid=True, enter=False).json()
        assert control["kill"] == "ok"
        victim.wait(timeout=10)
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("stage", ["python", "c"])
def test_landlock_blocks_outside_abstract_socket(sandbox: Sandbox, stage: str) -> None:
    require_abi(landlock.SCOPE_ABI)
    name = f"cs-test-{uuid.uuid4().hex}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(4)
    try:
        result = sandbox.probe("abstract", name, stage=stage).json()
        assert result["connect"] == "EPERM"
        control = sandbox.probe("abstract", name, enter=False).json()
        assert control["connect"] == "ok"
    finally:
        listener.close()


def _caps(sandbox: Sandbox, max_pids: int | None, max_memory: int | None):  # type: ignore[no-untyped-def]
    """The plan for this user, its cgroup (root only here), and the _enter settings."""
    facts = cgroups.probe_cgroups() if sandbox.user == "root" else cgroups.CgroupFacts()
    uid = 0 if sandbox.user == "root" else 1
    plan = limits.plan_limits(max_pids, max_memory, facts, uid)
    rl = dict(plan.rlimits)
    settings = Inner(
        "standard",
        max_pids=rl.get(kernel.RLIMIT_NPROC),
        max_memory=rl.get(kernel.RLIMIT_DATA),
        writable=(str(sandbox.work),),
    )
    cgroup = cgroups.create(plan.cgroup)  # last: the tests remove it, whatever happens after
    return plan, cgroup, settings


@pytest.mark.parametrize("stage", ["python", "c"])
def test_fork_bomb_stops_at_max_pids(sandbox: Sandbox, stage: str) -> None:
    _plan, cgroup, settings = _caps(sandbox, 64, None)
    try:
        result = sandbox.probe(
            "forkbomb", "500", settings=settings, timeout=60, stage=stage,
            preexec=cgroup.join if cgroup else None,
        ).json()  # fmt: skip
    finally:
        leftovers = cgroup.remove() if cgroup else []
    assert result["stopped_by"] == "EAGAIN", result
    assert 40 <= int(result["forked"]) < 64  # type: ignore[call-overload]
    assert not leftovers
    if cgroup:
        assert not any(os.path.exists(d) for d in cgroup.dirs)


@pytest.mark.parametrize("stage", ["python", "c"])
def test_allocation_past_max_memory_fails_inside_only(sandbox: Sandbox, stage: str) -> None:
    _plan, cgroup, settings = _caps(sandbox, None, 256 << 20)
    try:
        result = sandbox.probe(
            "allocate", "512", settings=settings, timeout=120, stage=stage,
            preexec=cgroup.join if cgroup else None,
        ).json()  # fmt: skip
        small = sandbox.probe(
            "allocate", "64", settings=settings, timeout=60, stage=stage,
            preexec=cgroup.join if cgroup else None,
        ).json()  # fmt: skip
    finally:
        leftovers = cgroup.remove() if cgroup else []
    assert result["parent_alive"] is True
    assert result["exit"] == 3 or result["signal"] == signal.SIGKILL, result
    assert small["exit"] == 0, small
    assert not leftovers


@pytest.mark.parametrize("stage", ["python", "c"])
def test_core_dumps_are_off(sandbox: Sandbox, stage: str) -> None:
    result = sandbox.run(["/bin/sh", "-c", "ulimit -c; ulimit -Hc"], stage=stage)
    assert result.stdout.split() == ["0", "0"], result.stdout


def test_enter_cost_is_small(sandbox: Sandbox) -> None:
    # Bounded, not a benchmark: bench/bench_layers.py measures properly.
    start = time.perf_counter()
    assert sandbox.run(["/bin/true"], level="harsh").returncode == 0
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("stage", ["python", "c"])
def test_the_agent_gets_the_environment_bwrap_set(sandbox: Sandbox, stage: str) -> None:
    """Where the locale is C, the Python stage's interpreter adds LC_CTYPE=C.UTF-8 to its
    own environment at start (PEP 538); the agent gets exactly what bwrap set, at either
    stage, and so exactly what the plan says."""
    done = sandbox.run(["/usr/bin/env"], env={"LANG": "", "CSBX_MARK": "kept"}, stage=stage)
    assert done.returncode == 0, done.stderr
    given = done.stdout.splitlines()
    assert "CSBX_MARK=kept" in given and "LANG=" in given, given
    assert not [line for line in given if line.startswith("LC_")], given
