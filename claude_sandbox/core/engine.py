"""What of the container engine or the host stops the sandbox's namespaces: named, with the
exact fix and what the fix costs (docs/how-to/docker.md).

Dev containers run on engines whose defaults differ. Docker's seccomp profile refuses
`unshare`, `mount` and `setns` to a container without CAP_SYS_ADMIN; its AppArmor profile
(`docker-default`) refuses `mount`; Ubuntu 23.10 and later take capabilities away from
user namespaces an unconfined program makes; gVisor has no pasta-compatible network. Each
would otherwise end a launch with a raw message from bwrap or unshare, or a guess. Both
the launch (before the sandbox is used: jail/preflight.py) and doctor ask `blocker()`.

Everything here reads /proc or makes one system call that changes nothing: `unshare(0)`
asks the seccomp filter about `unshare` itself, whatever the flags (0 unshares nothing).
"""

from __future__ import annotations

import os
import sys

from claude_sandbox.core import kernel
from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError
from claude_sandbox.core.record import record

# The text gVisor's Sentry gives as the kernel's version string (it runs no Linux).
GVISOR_VERSION = "#1 SMP Sun Jan 10 15:06:54 PST 2016"
# AppArmor profiles engines apply by default; each denies `mount` (bwrap's first step).
ENGINE_APPARMOR = ("docker-default", "containers-default", "cri-containerd.apparmor.d",
                   "crio-default")
PROFILE_HOWTO = "docs/how-to/docker.md"


@record
class EngineFacts:
    seccomp_refuses_unshare: bool
    apparmor: str  # this process's AppArmor label ("" without AppArmor)
    # Under an engine's AppArmor profile: whether it refused a mount in a namespace of our
    # own (bwrap's first step); None where no such profile applies (not asked).
    apparmor_refuses_mount: bool | None
    max_user_namespaces: int | None
    unprivileged_userns_clone: int | None  # Debian's and Ubuntu's switch; None: absent
    apparmor_restricts_userns: int | None  # Ubuntu 23.10+; None: absent
    gvisor: bool
    pod: bool  # a Kubernetes pod: the fix is spelled in the pod's terms
    uid: int


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _number(path: str) -> int | None:
    text = _read(path)
    return int(text) if text.lstrip("-").isdigit() else None


def _unshare_refused() -> bool:
    """Whether a seccomp filter refuses unshare(2) itself (EPERM for flags 0, which
    otherwise succeeds and changes nothing)."""
    from claude_sandbox.core.libc import get_errno, load_libc

    if load_libc().unshare(0) == 0:
        return False
    return get_errno() == 1  # EPERM; anything else is no answer about seccomp


def _mount_refused() -> bool:
    """Whether a forked child, in a user and mount namespace of its own, is refused what
    bwrap does first (making / private): EACCES is AppArmor's answer."""
    from claude_sandbox.core.libc import get_errno, load_libc

    pid = os.fork()
    if pid == 0:
        status = 2
        try:
            libc = load_libc()
            if libc.unshare(kernel.CLONE_NEWUSER | kernel.CLONE_NEWNS) == 0:
                private = kernel.MS_REC | kernel.MS_PRIVATE
                refused = libc.mount(b"none", b"/", None, private, None) != 0
                status = 13 if refused and get_errno() == 13 else 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 13


def _engine_profile(label: str) -> bool:
    return label.endswith("(enforce)") and label.split(" ")[0] in ENGINE_APPARMOR


def read() -> EngineFacts:
    label = _read("/proc/self/attr/apparmor/current") or _read("/proc/self/attr/current")
    return EngineFacts(
        seccomp_refuses_unshare=_unshare_refused(),
        apparmor=label,
        apparmor_refuses_mount=_mount_refused() if _engine_profile(label) else None,
        max_user_namespaces=_number("/proc/sys/user/max_user_namespaces"),
        unprivileged_userns_clone=_number("/proc/sys/kernel/unprivileged_userns_clone"),
        apparmor_restricts_userns=_number(
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        gvisor=GVISOR_VERSION in _read("/proc/version"),
        pod="KUBERNETES_SERVICE_HOST" in os.environ
        or os.path.isdir("/var/run/secrets/kubernetes.io"),
        uid=os.getuid(),
    )


def blocker(facts: EngineFacts, failed: bool = False) -> str | None:
    """The first setting that stops the sandbox, as one line: what, its fix, and the fix's
    cost; None when nothing this module knows of does. `failed`: a namespace could not be
    made, so a setting that only may stop it is named too. Pure."""
    if facts.gvisor:
        return ("this container runs under gVisor, which gives bwrap and pasta no kernel "
                "namespaces to build the sandbox from; run the dev container with runc or "
                "crun (--runtime runc)")
    if facts.max_user_namespaces == 0:
        return ("user namespaces are off on this host (user.max_user_namespaces = 0); on the "
                "host: sysctl -w user.max_user_namespaces=15000")
    if facts.unprivileged_userns_clone == 0 and facts.uid != 0:
        return ("unprivileged user namespaces are off on this host "
                "(kernel.unprivileged_userns_clone = 0); on the host: sysctl -w "
                "kernel.unprivileged_userns_clone=1")
    if facts.seccomp_refuses_unshare:
        where = ("securityContext.seccompProfile of type Localhost naming that file on the "
                 "node" if facts.pod else "--security-opt seccomp=FILE (devcontainer.json: "
                 "runArgs)")
        return ("the container's seccomp profile refuses unshare, mount and setns (Docker's "
                "default does, to a container without CAP_SYS_ADMIN); make FILE from the "
                "engine's default with deploy/seccomp/make_profile.py and run with "
                f"{where} ({PROFILE_HOWTO}); not seccomp=unconfined, which drops the whole "
                "filter, nor --cap-add SYS_ADMIN, which gives every process in the container "
                "mount and more")
    label = facts.apparmor.split(" ")[0]
    if facts.apparmor_refuses_mount:
        where = ("the container's appArmorProfile of type Unconfined, or a Localhost "
                 "profile" if facts.pod else "--security-opt apparmor=unconfined, or a "
                 "profile of your own")
        return (f"the container's AppArmor profile ({label}) refuses mount, which bwrap "
                f"needs; run with {where} that allows mount ({PROFILE_HOWTO}; unconfined "
                "drops AppArmor's confinement of the container)")
    # Only after a failure: bwrap, pasta and the launcher's interpreter (the jail's holder
    # makes its namespaces in it) may have profiles of their own that allow user
    # namespaces (Ubuntu ships one for bwrap).
    if failed and facts.apparmor_restricts_userns == 1 and facts.uid != 0:
        interpreter = os.path.realpath(sys.executable)
        return ("this host's kernel.apparmor_restrict_unprivileged_userns = 1 (Ubuntu 23.10 "
                "and later) leaves user namespaces without capabilities; on the host: load "
                f"an AppArmor profile that allows userns for bwrap, pasta and {interpreter} "
                "(which allows it for every program that interpreter runs), or sysctl -w "
                "kernel.apparmor_restrict_unprivileged_userns=0 (for every program; "
                f"{PROFILE_HOWTO})")
    return None


def refuse_if_blocked() -> None:
    """Before a launch starts anything: refuse it, in one line, where a setting stops it."""
    why = blocker(read())
    if why is not None:
        raise SandboxError(why, EXIT_UNAVAILABLE)
