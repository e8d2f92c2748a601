"""The launch plan: one frozen record, made by one pure function (docs/explanation/architecture.md).

`make` turns the facts a launch gathered (gather.py) with the agent's profile
and the resolved configuration into a `Plan`. Everything else is a rendering
of that one object (render.py): bwrap's command line, the inner stage's record
(inside/spec.py), `claude-sandbox explain`, the reference docs. Nothing is
turned into strings and parsed back: what is writable, what must stay
executable and what crosses into the sandbox are fields, not flags.

The mounts themselves come from mounts.py, whose order is part of the security
model.
"""

from __future__ import annotations

import os

from claude_sandbox.core import kernel, paths
from claude_sandbox.core.record import record, replace
from claude_sandbox.inside.spec import Inner
from claude_sandbox.jail import egresspolicy
from claude_sandbox.jail.spec import JailSpec
from claude_sandbox.launch.configure.config import Config
from claude_sandbox.launch.configure.profiles import Profile
from claude_sandbox.launch.facts.credentials import TRUST_VARIABLES, Credential
from claude_sandbox.launch.facts.gather import Gathered
from claude_sandbox.launch.planner import brokered, environment, mounts, overlays, pins, seccomp
from claude_sandbox.launch.planner.limits import LimitPlan
from claude_sandbox.launch.planner.mounts import (
    CODEX_CONFIG,
    GITCONFIG,
    RESOLV_CONF,
    Mount,
    Option,
    Writable,
)
from claude_sandbox.launch.planner.overlays import View


def _pinned(mount_list: tuple[Mount, ...], home: str) -> tuple[Mount, ...]:
    """The directories above each mount point in the agent's store, bound onto themselves
    right after $HOME's bind: no session can rename one while it runs (session/mountpoints.py)."""
    pinned = pins.pinned(home, mount_list)
    at = next((i + 1 for i, m in enumerate(mount_list) if m.dest == home), None)
    if not pinned or at is None:
        return mount_list
    reason = ("a directory above a mount point in the store, bound onto itself: no session "
              "can rename it or put a link in its place while it runs (check 105)")
    return (*mount_list[:at],
            *(Mount(pins.PIN, d, reason, source=pins.pin_name(d)) for d in pinned),
            *mount_list[at:])


# The kinds of late mask, each what bwrap cannot make cheaply or at all.
LATE_KINDS = ("root-only", "outer-proc", "noexec")


@record
class LateMask:
    kind: str  # one of LATE_KINDS
    when: str
    what: str
    reason: str
    check: str  # the numbered check that proves it


@record
class Plan:
    agent: str
    options: tuple[Option, ...]  # namespaces, capabilities: before every mount
    mounts: tuple[Mount, ...]  # in bwrap's order
    cwd: str
    env: tuple[tuple[str, str], ...]  # the sandbox's whole environment
    pass_env: tuple[str, ...]  # names whose values come from the launch: never shown
    data: tuple[tuple[str, str], ...]  # (descriptor name, content) for ro-bind-data mounts
    inner: Inner  # what the inner stage applies inside, then execs
    limits: LimitPlan
    jail: JailSpec | None
    layout: Writable  # the writable roots, their control files and git directories
    # Overlays mounted before bwrap, which its binds carry in (core/views.py, ADR 0010).
    views: tuple[View, ...]
    workspace_store: str  # the agent's per-workspace directory in its store
    # What the launcher's helper masks once bwrap has set the sandbox up, before the
    # agent runs (session/procmask.py): rows, as the mounts are.
    late: tuple[LateMask, ...] = ()
    credentials: tuple[Credential, ...] = ()  # brokered: a sentinel inside (credentials.py)
    seccomp_flags: tuple[str, ...] = ()  # flag keys that drop filter rows (seccomp.py)
    # The inner stage bwrap runs: the compiled one (inside/enter.c) for the standard level
    # where it is installed, "" for `_enter` in Python (ADR 0017).
    stage: str = ""


def make(profile: Profile, cfg: Config, gathered: Gathered, limits: LimitPlan) -> Plan:
    """The whole launch, decided: pure, from what gather.py read and the configuration."""
    facts = gathered.facts
    store = overlays.workspace_store(os.path.dirname(facts.store_home), gathered.layout.workspace)
    mount_list = mounts.build(profile, cfg, facts, gathered.layout,
                              codex_config=gathered.codex_config is not None,
                              jailed=cfg.egress_jail)
    if gathered.runners is not None:
        mount_list = (*mount_list, brokered.MOUNT)
    contents = {GITCONFIG: gathered.gitconfig, CODEX_CONFIG: gathered.codex_config or "",
                RESOLV_CONF: resolv_conf(gathered.resolv_conf)}
    mount_list, brokered_data = _credential_mounts(mount_list, gathered)
    mount_list = _pinned(mount_list, facts.home)
    contents.update(brokered_data)
    # Only what a mount binds: a descriptor nothing consumes would reach the agent.
    used = [m.source for m in mount_list if m.kind == "data"]
    data = tuple((name, contents[name]) for name in dict.fromkeys(used))
    env = environment.environment(profile, cfg, facts, dict(gathered.environ))
    if gathered.credentials.env or gathered.trust is not None:
        # Each brokered variable holds its sentinel, and every tool's trust is the bundle
        # with the broker's CA.
        trust = dict.fromkeys(TRUST_VARIABLES, gathered.trust[0]) if gathered.trust else {}
        env = tuple(sorted({**dict(env), **dict(gathered.credentials.env), **trust}.items()))
    rlimits = dict(limits.rlimits)  # what no cgroup enforces, the inner stage sets
    per_process = "max-memory" not in limits.defaults and kernel.RLIMIT_DATA in rlimits
    if per_process:
        mount_list = _tmpfs_within(mount_list, rlimits[kernel.RLIMIT_DATA])
    writable = tuple(dict.fromkeys(m.dest for m in mount_list if m.kind in ("bind", "tmpfs")))
    late = late_masks(facts.uid, facts.proc_mountable, noexec=cfg.hardening == "harsh")
    inner = Inner(
        level=cfg.hardening,
        max_pids=rlimits.get(kernel.RLIMIT_NPROC),
        max_memory=rlimits.get(kernel.RLIMIT_DATA),
        # Writable inside: read-write binds and tmpfs mounts.
        writable=writable,
        # Programs bound read-only, perhaps inside writable trees: harsh keeps them runnable.
        exec_files=tuple(dict.fromkeys(m.dest for m in mount_list if m.runs)),
        keep_ignored=gathered.keep_ignored,
        late_masks=bool(late),
        command=gathered.command,
        **(brokered.fields(gathered.runners, gathered.layout, mount_list, facts.uid, dict(env),
                           gathered.command, cfg.local_ports, cfg.callback_ports)
           if gathered.runners is not None else {}),
        offline_commands=cfg.offline_commands and gathered.runners is not None,
    )
    jail = JailSpec(cfg.allow_ip, cfg.local_ports, cfg.callback_ports,
                    gathered.host_addresses, cfg.egress_policy,
                    egresspolicy.rules_for(profile.name, cfg.allow_domain),
                    profile.name, upstream=gathered.upstream[0]) if cfg.egress_jail else None
    return Plan(
        agent=profile.name,
        options=mounts.options(facts),
        mounts=mount_list,
        cwd=facts.cwd,
        env=env,
        pass_env=(*cfg.pass_env, *(name for name, _ in gathered.credentials.env)),
        data=data,
        inner=inner,
        limits=limits,
        jail=jail,
        layout=gathered.layout,
        views=overlays.views(gathered.layout, store, review=cfg.workspace_mode == "review"),
        workspace_store=store,
        late=late,
        credentials=gathered.credentials.credentials,
        seccomp_flags=(*(("allow-vsock",) if cfg.allow_vsock else ()),
                       *((seccomp.MEMORY_PER_PROCESS,) if per_process else ())),
        stage=(paths.ENTER_STAGE if inner.level == "standard"
               and paths.ENTER_STAGE in facts.existing else ""),
    )


def masks_root_only(uid: int) -> bool:
    """Whether a launch by `uid` covers root's own files: a root launch (ADR 0015). The
    launch forks the late-mount helper early on this alone (run.py, steps.py)."""
    return uid == 0


def late_masks(uid: int, proc_mountable: bool, *, noexec: bool) -> tuple[LateMask, ...]:
    """What the helper masks: root's own files on a root launch, the outer processes
    where the engine's masks keep a fresh procfs out, and under harsh every writable
    mount's exec."""
    rows = []
    if masks_root_only(uid):
        rows.append(LateMask(
            "root-only", "a root launch",
            "each tree shown read-only through a view mounted by an id that owns nothing "
            "there, which refuses what root's own modes keep from others (in a tree with a "
            "mount below it, or where the kernel refuses a view, an empty file or "
            "directory over each such entry)",
            "root is not a skeleton key: what root's own modes keep from others stays unread",
            "59"))
    if not proc_mountable:
        rows.append(LateMask(
            "outer-proc", "the engine masks parts of /proc, so no fresh procfs can be mounted",
            "an empty directory over /proc/PID of each process outside",
            "the engine masks /proc, so the outer one is bound: its processes are hidden one "
            "by one", "33"))
    if noexec:
        rows.append(LateMask(
            "noexec", "hardening = harsh", "every writable mount the agent can reach noexec",
            "harsh: nothing written here is mapped executable, LD_PRELOAD and ld.so included",
            "90"))
    return tuple(rows)


def masks(plan: Plan, kind: str) -> bool:
    """Whether the plan has the late mask `kind`."""
    return any(row.kind == kind for row in plan.late)


def _tmpfs_within(mount_list: tuple[Mount, ...], memory: int) -> tuple[Mount, ...]:
    """max-memory held per process only (no memory cgroup): every tmpfs of the sandbox
    together within it, an equal share each, so files in memory (/tmp, /dev/shm) cannot
    go past what the operator set (check 91)."""
    sized = [m for m in mount_list if m.kind == "tmpfs" and m.size is not None]
    share = max(memory // max(len(sized), 1), 1 << 20)
    return tuple(replace(m, size=min(m.size, share)) if m in sized and m.size is not None
                 else m for m in mount_list)


TRUST_BUNDLE = "trust-bundle"  # the data descriptor of the bundle bound inside


def _credential_mounts(mount_list: tuple[Mount, ...], gathered: Gathered
                       ) -> tuple[tuple[Mount, ...], dict[str, str]]:
    """The forge files with sentinels for tokens, and the trust bundle with the broker's
    CA, bound over the originals last (before the root turns read-only): nothing after
    them may show the original again."""
    added, data = [], {}
    for number, (rel, text) in enumerate(gathered.credentials.forge):
        name = f"forge-{number}"
        added.append(Mount("data", os.path.join(gathered.facts.home, rel), "a forge token "
                           "is a sentinel inside; the egress proxy adds the real one (check 83)",
                           source=name))
        data[name] = text
    if gathered.trust is not None:
        added.append(Mount("data", gathered.trust[0], "the system's trust bundle and the "
                           "credential broker's CA (checks 84, 85)", source=TRUST_BUNDLE))
        data[TRUST_BUNDLE] = gathered.trust[1]
    if not added:
        return mount_list, data
    last = len(mount_list) - 1 if mount_list and mount_list[-1].kind == "remount-ro" \
        else len(mount_list)
    return (*mount_list[:last], *added, *mount_list[last:]), data


# What the jail's resolv.conf keeps of the host's: pasta answers only queries sent to
# its forwarder address; queries to the host's resolver (blackholed) would time out.
_RESOLV_KEEP = ("search", "domain", "options")


def resolv_conf(host_text: str) -> str:
    """The sandbox's /etc/resolv.conf in the jail: the forwarder, the host's search list."""
    kept = [line.strip() for line in host_text.splitlines()
            if line.split()[:1] and line.split()[0] in _RESOLV_KEEP]
    return "".join(f"{line}\n" for line in [f"nameserver {paths.DNS_FORWARDER}", *kept])
