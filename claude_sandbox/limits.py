"""Resource caps: `max-pids`, `max-memory`, and core dumps off (docs/explanation/kernel-layers.md).

Two mechanisms, chosen per launch by `plan_limits` from probed host facts:

- a cgroup, made outside bwrap by the launcher: cgroup v2 where a delegated
  subtree has the pids/memory controllers, else the v1 pids/memory
  hierarchies where they are writable (root on a hybrid host). A cgroup caps
  the whole sandbox, and it is the only cap that binds root: the kernel never
  enforces RLIMIT_NPROC for the initial namespace's root user.
- rlimits, set inside bwrap by `_enter` (enter.py): RLIMIT_NPROC counts the
  tasks of one uid *per user namespace*, and bwrap gives the sandbox a fresh
  one, so set inside it caps the sandbox, not every process of the user.
  RLIMIT_DATA caps each process's private writable memory. RLIMIT_AS is never
  used: V8 reserves tens of GiB of address space and dies under it.

A cgroup must be removed after its last process is gone, so it needs a
process that outlives the sandbox: the jailed launch's waiting parent, or
`run_supervised` for an unjailed one. Directories are named after the
launcher's PID, and every launch first sweeps the directories of launchers
that are gone (a SIGKILLed parent cannot clean up after itself).

Whatever cannot be enforced is refused (pids for root with no cgroup) or
warned about in one stderr line (memory as a per-process cap only).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Mapping, Sequence

from .errors import EXIT_UNAVAILABLE, SandboxError
from .process import pid_alive
from .record import record

CGROUP_ROOT = "/sys/fs/cgroup"
_NAME = "claude-sandbox-{pid}"
_PREFIX = "claude-sandbox-"


@record
class CgroupFacts:
    """Writable cgroup directories the launcher may make children in ("" = none),
    and the limits the launcher already lives under (0: none found)."""

    v2: str = ""  # a v2 directory whose subtree_control enables pids and memory
    v1_pids: str = ""
    v1_memory: str = ""
    pids_limit: int = 0  # the tightest pids.max above us, or RLIMIT_NPROC
    memory_limit: int = 0  # the tightest memory limit above us, or MemTotal


# Caps every sandbox gets unless the operator sets its own (ADR 0006): half of
# the processes the container may still start, at most DEFAULT_PIDS, and three
# quarters of its memory. A runaway agent then hits its own wall first, and the
# container's shell, IDE server and this launcher keep working.
DEFAULT_PIDS = 4096
MEMORY_SHARE = (3, 4)


@record
class CgroupWrite:
    base: str  # the parent directory; the child is base/claude-sandbox-PID
    file: str
    value: str
    optional: bool = False  # written only where the kernel has the file (swap accounting)


@record
class LimitPlan:
    cgroup: tuple[CgroupWrite, ...]  # applied outside bwrap, before it starts
    rlimits: tuple[tuple[int, int], ...]  # (RLIMIT_*, value), applied inside by _enter
    warnings: tuple[str, ...]

    @property
    def needs_parent(self) -> bool:
        """A cgroup is in the plan, so a process must wait to remove it."""
        return bool(self.cgroup)


def _own_cgroup(controller: str, proc_cgroup: str) -> str | None:
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def probe_cgroups(proc_cgroup: str | None = None) -> CgroupFacts:
    """Find writable cgroup directories under this process's own cgroups."""
    if proc_cgroup is None:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            proc_cgroup = f.read()

    def usable(directory: str) -> str:
        return directory if os.access(directory, os.W_OK | os.X_OK) else ""

    v2 = ""
    own = _own_cgroup("", proc_cgroup)
    for mount in (CGROUP_ROOT, f"{CGROUP_ROOT}/unified"):
        if own is None or not os.path.exists(f"{mount}/cgroup.controllers"):
            continue
        directory = os.path.normpath(mount + own)
        try:
            with open(f"{directory}/cgroup.subtree_control", encoding="utf-8") as f:
                enabled = f.read().split()
        except OSError:
            continue
        if "pids" in enabled and "memory" in enabled:
            v2 = usable(directory)
        break
    v1 = {}
    for controller in ("pids", "memory"):
        own_v1 = _own_cgroup(controller, proc_cgroup)
        hierarchy = f"{CGROUP_ROOT}/{controller}"
        v1[controller] = (
            usable(os.path.normpath(hierarchy + own_v1))
            if own_v1 and os.path.exists(f"{hierarchy}/cgroup.procs")
            else ""
        )
    return CgroupFacts(v2, v1["pids"], v1["memory"], _pids_limit(proc_cgroup),
                       _memory_limit(proc_cgroup))


def _number(path: str) -> int:
    """A cgroup limit file's value; 0 for "max", absent or unreadable."""
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def _ancestors(mount: str, own: str | None) -> list[str]:
    if own is None:
        return []
    path = os.path.normpath(mount + own)
    found = []
    while path.startswith(mount):
        found.append(path)
        if path == mount:
            break
        path = os.path.dirname(path)
    return found


def _tightest(values: list[int]) -> int:
    positive = [v for v in values if v > 0]
    return min(positive) if positive else 0


def _pids_limit(proc_cgroup: str) -> int:
    values = [_number(f"{d}/pids.max") for d in
              _ancestors(CGROUP_ROOT, _own_cgroup("", proc_cgroup)) +
              _ancestors(f"{CGROUP_ROOT}/pids", _own_cgroup("pids", proc_cgroup))]
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and os.getuid() != 0:
        values.append(soft)
    return _tightest(values)


def _memory_limit(proc_cgroup: str) -> int:
    values = [_number(f"{d}/memory.max") for d in
              _ancestors(CGROUP_ROOT, _own_cgroup("", proc_cgroup))]
    values += [_number(f"{d}/memory.limit_in_bytes") for d in
               _ancestors(f"{CGROUP_ROOT}/memory", _own_cgroup("memory", proc_cgroup))]
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    values.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError):
        pass
    # v1 reports "no limit" as a huge number, not "max".
    return _tightest([v for v in values if v < 1 << 60])


def prefer_for_oom() -> None:
    """Make this launch (everything it starts inherits it) the kernel's first choice
    when memory runs out: the agent is killed, the container's own work is not.

    Raising oom_score_adj needs no privilege; nothing inside can lower it again.
    Where /proc is read-only here the write fails and the caps above stand alone.
    """
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as handle:
            handle.write("1000")
    except OSError:
        pass


def default_caps(facts: CgroupFacts) -> tuple[int, int]:
    """(max-pids, max-memory) when the operator set none: see DEFAULT_PIDS."""
    pids = min(DEFAULT_PIDS, facts.pids_limit // 2) if facts.pids_limit else DEFAULT_PIDS
    memory = facts.memory_limit * MEMORY_SHARE[0] // MEMORY_SHARE[1]
    return max(pids, 64), memory


def plan_limits(
    max_pids: int | None, max_memory: int | None, facts: CgroupFacts, uid: int
) -> LimitPlan:
    """Pure: which mechanism enforces each cap, and what cannot be enforced.

    A cap the operator did not set is the default (default_caps) and best
    effort: where nothing can enforce it, it is left out without a warning
    (`claude-sandbox explain` shows what holds). A cap the operator set is
    enforced or refused, and a weaker mechanism is said aloud.
    """
    explicit_pids, explicit_memory = max_pids is not None, max_memory is not None
    auto_pids, auto_memory = default_caps(facts)
    max_pids = max_pids if explicit_pids else auto_pids
    max_memory = max_memory if explicit_memory else (auto_memory or None)
    cgroup: list[CgroupWrite] = []
    rlimits: list[tuple[int, int]] = [(resource.RLIMIT_CORE, 0)]  # always: no core files
    warnings: list[str] = []
    if max_pids is not None:
        if facts.v2:
            cgroup.append(CgroupWrite(facts.v2, "pids.max", str(max_pids)))
        elif facts.v1_pids:
            cgroup.append(CgroupWrite(facts.v1_pids, "pids.max", str(max_pids)))
        elif uid == 0 and explicit_pids:
            raise SandboxError(
                "max-pids cannot be enforced: no writable pids cgroup, and the kernel "
                "ignores RLIMIT_NPROC for root; unset max-pids or delegate a cgroup",
                EXIT_UNAVAILABLE,
            )
        elif uid != 0:
            rlimits.append((resource.RLIMIT_NPROC, max_pids))
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
            rlimits.append((resource.RLIMIT_DATA, max_memory))
            if explicit_memory:
                warnings.append(
                    "max-memory is enforced per process (RLIMIT_DATA), not for the whole "
                    "sandbox: no writable memory cgroup"
                )
    return LimitPlan(tuple(cgroup), tuple(rlimits), tuple(warnings))


# ------------------------------------------------------------------ cgroups
@record
class Cgroup:
    """The per-launch cgroup directories; one per hierarchy in the plan."""

    dirs: tuple[str, ...]

    def attach(self, pid: int) -> None:
        """Move `pid` in; its later children follow. Do it before the sandbox forks."""
        for directory in self.dirs:
            _write(f"{directory}/cgroup.procs", str(pid))

    def join(self) -> None:
        self.attach(0)  # "0": the writing process itself (v1 and v2)

    def leave(self) -> None:
        """Move the writing process back to the parent cgroup, so the child can be removed."""
        for directory in self.dirs:
            procs = f"{os.path.dirname(directory)}/cgroup.procs"
            try:
                with open(procs, "w") as handle:
                    handle.write("0")
            except OSError:
                pass  # already out, or the parent is gone: remove() then reports it

    def remove(self, timeout: float = 2.0) -> list[str]:
        """rmdir every directory; retry while exiting tasks drain. Returns leftovers."""
        deadline = time.monotonic() + timeout
        left = list(self.dirs)
        while left:
            for directory in list(left):
                try:
                    os.rmdir(directory)
                    left.remove(directory)
                except FileNotFoundError:
                    left.remove(directory)
                except OSError:
                    pass
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        return left


def _write(path: str, value: str) -> None:
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write(value)
    except OSError as exc:
        raise SandboxError(
            f"cannot write {value!r} to {path}: {exc.strerror}", EXIT_UNAVAILABLE
        ) from None


def sweep_stale(base: str, dead: int = 0) -> None:
    """Remove directories whose launcher died without cleaning up (SIGKILL).

    `dead`: a launcher known to be gone though its pid still exists (janitor.py).
    """
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        pid = name[len(_PREFIX):] if name.startswith(_PREFIX) else ""
        if pid.isascii() and pid.isdigit() and (int(pid) == dead or not pid_alive(int(pid))):
            try:
                os.rmdir(os.path.join(base, name))
            except OSError:
                pass  # still populated or already gone: a later launch retries


def create(plan: LimitPlan, owner_pid: int | None = None) -> Cgroup | None:
    """Make the per-launch cgroup(s) and write the caps; None when the plan has none.

    `owner_pid` is the process that will remove them (the waiting parent).
    """
    if not plan.cgroup:
        return None
    name = _NAME.format(pid=owner_pid or os.getpid())
    dirs: list[str] = []
    made = Cgroup(())
    try:
        for write in plan.cgroup:
            directory = os.path.join(write.base, name)
            if directory not in dirs:
                sweep_stale(write.base)
                os.mkdir(directory, 0o755)
                dirs.append(directory)
                made = Cgroup(tuple(dirs))
            target = f"{directory}/{write.file}"
            if write.optional and not os.path.exists(target):
                continue
            _write(target, write.value)
    except OSError as exc:
        made.remove()
        raise SandboxError(
            f"cannot create cgroup {name}: {exc.strerror}", EXIT_UNAVAILABLE
        ) from None
    except SandboxError:
        made.remove()
        raise
    return made


def run_supervised(
    argv: Sequence[str], env: Mapping[str, str], cgroup: Cgroup | None,
    pass_fds: Sequence[int] = (),
) -> int:
    """For an unjailed launch: fork, cap, exec, wait; the caller then cleans up.

    The parent stays in the terminal's foreground process group with the
    child, so ^Z stops both and `fg` continues both; signals sent to it reach
    the session (process.Forward), and it is not dumpable (egress-jail.md,
    Channels). Returns the child's exit status in shell form.
    """
    import ctypes  # only on this path: the plain launch never pays for it

    from .process import Forward, die_with_parent, ignore_session_signals

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    for fd in pass_fds:
        os.set_inheritable(fd, True)
    pid = os.fork()
    if pid == 0:
        try:
            if cgroup is not None:
                cgroup.join()
            ignore_session_signals()
            # The session dies with the launcher, even a SIGKILLed one.
            if die_with_parent():
                os.execve(argv[0], list(argv), dict(env))
        finally:
            os._exit(127)
    for fd in pass_fds:
        os.close(fd)
    forward = Forward(pid)
    try:
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
                break
            except ChildProcessError:
                code = 0
                break
            except InterruptedError:
                continue
    finally:
        forward.close()
    if cgroup is not None:
        cgroup.remove()
    return forward.status(code)


def describe(max_pids: int | None, max_memory: int | None, plan: LimitPlan) -> list[str]:
    lines = ["resource caps: core dumps off (RLIMIT_CORE 0)"]
    names = {resource.RLIMIT_NPROC: "RLIMIT_NPROC (this sandbox's user namespace)",
             resource.RLIMIT_DATA: "RLIMIT_DATA (per process)"}  # fmt: skip
    for write in plan.cgroup:
        lines.append(f"  cgroup {write.base}/claude-sandbox-PID: {write.file} = {write.value}")
    for which, value in plan.rlimits:
        if which in names:
            lines.append(f"  {names[which]} = {value}")
    enforced = {write.file for write in plan.cgroup} | {which for which, _ in plan.rlimits}
    if max_pids is None:
        held = "pids.max" in enforced or resource.RLIMIT_NPROC in enforced
        lines.append("  max-pids: the default" + ("" if held else
                     ": nothing here can enforce it (root, no pids cgroup)"))
    if max_memory is None:
        lines.append("  max-memory: the default")
    lines.append("  oom_score_adj 1000: the sandbox is what the kernel kills first")
    lines.extend(f"  WARNING: {w}" for w in plan.warnings)
    return lines


# ------------------------------------------------- the `_enter` hand-off
@record
class KernelSettings:
    """What `_enter` applies inside the sandbox (enter.py parses it back).

    `max_pids` / `max_memory` are the caps left to rlimits: None where a
    cgroup outside enforces the cap (see `kernel_settings`), or where it is off.
    """

    level: str = "standard"
    max_pids: int | None = None  # RLIMIT_NPROC, counted in the sandbox's user namespace
    max_memory: int | None = None  # RLIMIT_DATA, per process
    writable: tuple[str, ...] = ()  # paths the sandbox can write (harsh: no EXECUTE there)
    exec_files: tuple[str, ...] = ()  # read-only binds inside writable trees that must run
    # The outer /proc is bound: the descriptor on which _enter asks the launcher's
    # helper to hide its processes (procmask.py); None with a fresh procfs.
    hide_outer_proc: int | None = None


def kernel_settings(
    level: str, plan: LimitPlan, writable: Sequence[str] = (), exec_files: Sequence[str] = (),
    hide_outer_proc: int | None = None,
) -> KernelSettings:
    """The settings for `_enter` that go with `plan`."""
    rl = dict(plan.rlimits)
    return KernelSettings(
        level,
        rl.get(resource.RLIMIT_NPROC),
        rl.get(resource.RLIMIT_DATA),
        tuple(writable),
        tuple(exec_files),
        hide_outer_proc,
    )


def enter_argv(settings: KernelSettings) -> list[str]:
    """Pure: the arguments between `_enter` and `--`."""
    args = ["--level", settings.level]
    if settings.max_pids is not None:
        args += ["--nproc", str(settings.max_pids)]
    if settings.max_memory is not None:
        args += ["--data", str(settings.max_memory)]
    for path in settings.writable:
        args += ["--writable", path]
    for path in settings.exec_files:
        args += ["--exec-file", path]
    if settings.hide_outer_proc is not None:
        args += ["--hide-outer-proc", str(settings.hide_outer_proc)]
    return args


def describe_kernel(settings: KernelSettings) -> list[str]:
    """The in-sandbox layers, for `claude-sandbox explain`."""
    from . import landlock

    lines = landlock.describe(settings.level)
    lines.append("rlimits inside: RLIMIT_CORE 0")
    if settings.max_pids is not None:
        lines.append(f"  RLIMIT_NPROC {settings.max_pids} (this sandbox's user namespace)")
    if settings.max_memory is not None:
        lines.append(f"  RLIMIT_DATA {settings.max_memory} (per process)")
    return lines
