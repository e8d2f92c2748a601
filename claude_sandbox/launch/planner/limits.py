"""Resource caps: `max-pids`, `max-memory`, and core dumps off (docs/explanation/kernel-layers.md).

Two mechanisms, chosen per launch by `plan_limits` from probed host facts:

- a cgroup, made outside bwrap by the launcher: cgroup v2 where a delegated
  subtree has the pids/memory controllers, else the v1 pids/memory
  hierarchies where they are writable (root on a hybrid host). A cgroup caps
  the whole sandbox, and it is the only cap that binds root: the kernel never
  enforces RLIMIT_NPROC for the initial namespace's root user.
- rlimits, set inside bwrap by the inner stage (enter.c, enter.py): RLIMIT_NPROC counts the
  tasks of one uid *per user namespace*, and bwrap gives the sandbox a fresh
  one, so set inside it caps the sandbox, not every process of the user.
  RLIMIT_DATA caps each process's private writable memory. RLIMIT_AS is never
  used: V8 reserves tens of GiB of address space and dies under it.

Whatever cannot be enforced is refused (pids for root with no cgroup) or
warned about in one stderr line (memory as a per-process cap only: then the plan
also keeps the sandbox's tmpfs mounts within it and the seccomp filter refuses
memfd_create, whose pages no per-process cap counts; check 91).
"""

from __future__ import annotations

import os

from claude_sandbox.core import kernel
from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError
from claude_sandbox.core.libc import load_libc
from claude_sandbox.core.process import Forward, fork_exec, ignore_session_signals
from claude_sandbox.core.record import record
from claude_sandbox.launch.session.cgroups import Cgroup, CgroupFacts, CgroupWrite

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from claude_sandbox.core.viewplaces import Views

# Caps every sandbox gets unless the operator sets its own (ADR 0006): half of
# the processes the container may still start, at most DEFAULT_PIDS, and three
# quarters of its memory. A runaway agent then hits its own wall first, and the
# container's shell, IDE server and this launcher keep working.
DEFAULT_PIDS = 4096
MEMORY_SHARE = (3, 4)


@record
class LimitPlan:
    cgroup: tuple[CgroupWrite, ...]  # applied outside bwrap, before it starts
    rlimits: tuple[tuple[int, int], ...]  # (RLIMIT_*, value), applied by the inner stage
    warnings: tuple[str, ...]
    defaults: tuple[str, ...] = ()  # the caps the operator left at their default


def prefer_for_oom() -> None:
    """Make this launch (everything it starts inherits it) the kernel's first choice
    when memory runs out: the agent is killed, the container's own work is not.

    Raising oom_score_adj needs no privilege; nothing inside can lower it again.
    Where /proc is read-only here the write fails and the caps above stand alone.
    """
    try:
        with open("/proc/self/oom_score_adj", "wb") as handle:
            handle.write(b"1000")
    except OSError:
        pass


def plan_limits(
    max_pids: int | None, max_memory: int | None, facts: CgroupFacts, uid: int
) -> LimitPlan:
    """Pure: which mechanism enforces each cap, and what cannot be enforced.

    A cap the operator did not set is the default (DEFAULT_PIDS, MEMORY_SHARE) and best
    effort: where nothing can enforce it, it is left out without a warning
    (`claude-sandbox explain` shows what holds). A cap the operator set is
    enforced or refused, and a weaker mechanism is said aloud.
    """
    explicit_pids, explicit_memory = max_pids is not None, max_memory is not None
    auto_pids = min(DEFAULT_PIDS, facts.pids_limit // 2) if facts.pids_limit else DEFAULT_PIDS
    pids = max_pids if max_pids is not None else max(auto_pids, 64)
    auto_memory = facts.memory_limit * MEMORY_SHARE[0] // MEMORY_SHARE[1]
    max_memory = max_memory if explicit_memory else (auto_memory or None)
    cgroup: list[CgroupWrite] = []
    rlimits: list[tuple[int, int]] = [(kernel.RLIMIT_CORE, 0)]  # always: no core files
    warnings: list[str] = []
    if facts.v2 or facts.v1_pids:
        cgroup.append(CgroupWrite(facts.v2 or facts.v1_pids, "pids.max", str(pids)))
    elif uid == 0 and explicit_pids:
        raise SandboxError(
            "max-pids cannot be enforced: no writable pids cgroup, and the kernel "
            "ignores RLIMIT_NPROC for root; unset max-pids or delegate a cgroup",
            EXIT_UNAVAILABLE,
        )
    elif uid != 0:
        # Never above the user's own soft limit: the inner stage sets soft and hard alike,
        # and raising either past the hard one is refused (EPERM), which refused every
        # launch where the default's floor of 64 exceeded it. Lower holds more tightly.
        rlimits.append((kernel.RLIMIT_NPROC, min(pids, facts.nproc) if facts.nproc else pids))
    if max_memory is not None:
        if facts.v2:
            cgroup.append(CgroupWrite(facts.v2, "memory.max", str(max_memory)))
            cgroup.append(CgroupWrite(facts.v2, "memory.swap.max", "0", optional=True))
        elif facts.v1_memory:
            base, value = facts.v1_memory, str(max_memory)
            cgroup.append(CgroupWrite(base, "memory.limit_in_bytes", value))
            # Swap must not extend the cap; memsw is set after the plain limit
            # because the kernel requires memsw >= limit at every step.
            cgroup.append(CgroupWrite(base, "memory.memsw.limit_in_bytes", value, optional=True))
        else:
            rlimits.append((kernel.RLIMIT_DATA, max_memory))
            if explicit_memory:
                warnings.append(
                    "max-memory holds per process (RLIMIT_DATA), with the sandbox's tmpfs "
                    "mounts within it together and memfd_create and System V shared memory "
                    "refused; not for all its processes together, nor for memory a process "
                    "maps shared: no writable memory cgroup"
                )
    defaults = tuple(name for name, explicit in (("max-pids", explicit_pids),
                                                 ("max-memory", explicit_memory)) if not explicit)
    return LimitPlan(tuple(cgroup), tuple(rlimits), tuple(warnings), defaults)


def run_supervised(
    argv: Sequence[str], env: Mapping[str, str], cgroup: Cgroup | None,
    pass_fds: Sequence[int] = (), overlays: Sequence[tuple[str, str, str, str]] = (),
    root_views: tuple[Views | None, Sequence[int]] = (None, ()),
) -> int:
    """For an unjailed launch: fork, cap, exec, wait; the caller then cleans up (the
    cgroup too, once it has read what the caps did).

    The parent stays in the terminal's foreground process group with the
    child, so ^Z stops both and `fg` continues both; signals sent to it reach
    the session (process.Forward), and it is not dumpable (egress-jail.md,
    Channels). Returns the child's exit status in shell form.
    """
    load_libc().prctl(kernel.PR_SET_DUMPABLE, 0, 0, 0, 0)

    def before_exec() -> None:
        if cgroup is not None:
            cgroup.join()
        ignore_session_signals()
        if overlays or root_views[0] is not None:  # without the jail, the child makes the
            from claude_sandbox.core import viewplaces, views  # mount namespace itself

            failed = views.own_mount_namespace(os.getuid(), os.getgid())
            if failed is None and root_views[0] is not None:  # a root launch's (ADR 0020)
                failed = viewplaces.attach_all(root_views[0], root_views[1])
                for fd in root_views[1]:  # attached: bwrap gets none (close-on-exec too)
                    os.close(fd)
            for lower, upper, work, target in overlays if failed is None else ():
                failed = views.mount_overlay(lower, upper, work, target)
                if failed is not None:
                    failed = f"cannot show {target} to the sandbox as an overlay ({failed})"
                    break
            if failed is not None:
                os.write(2, f"claude-sandbox: {failed}: the kernel must allow overlayfs in a "
                         "user namespace (Linux 5.11 or later)\n".encode())
                os._exit(EXIT_UNAVAILABLE)

    # The session dies with the launcher, even a SIGKILLed one (die_with_parent).
    child = fork_exec(argv, env, {}, setsid=False, die_with_parent=True, pass_fds=pass_fds,
                      before_exec=before_exec, keep_fds=root_views[1])
    for fd in pass_fds:
        os.close(fd)
    forward = Forward(child.pid)
    try:
        code = child.wait()
    finally:
        forward.close()
    return forward.status(code)  # the caller reads the cgroup's events, then removes it


def describe(plan: LimitPlan) -> list[str]:
    lines = ["resource caps: core dumps off (RLIMIT_CORE 0)"]
    names = {kernel.RLIMIT_NPROC: "RLIMIT_NPROC (this sandbox's user namespace)",
             kernel.RLIMIT_DATA: "RLIMIT_DATA (per process)"}  # fmt: skip
    for write in plan.cgroup:
        lines.append(f"  cgroup {write.base}/claude-sandbox-PID: {write.file} = {write.value}")
    for which, value in plan.rlimits:
        if which in names:
            lines.append(f"  {names[which]} = {value}")
    enforced = {write.file for write in plan.cgroup} | {which for which, _ in plan.rlimits}
    if "max-pids" in plan.defaults:
        held = "pids.max" in enforced or kernel.RLIMIT_NPROC in enforced
        lines.append("  max-pids: the default" + ("" if held else
                     ": nothing here can enforce it (root, no pids cgroup)"))
    if "max-memory" in plan.defaults:
        lines.append("  max-memory: the default")
    lines.append("  oom_score_adj 1000: the sandbox is what the kernel kills first")
    lines.extend(f"  WARNING: {w}" for w in plan.warnings)
    return lines
