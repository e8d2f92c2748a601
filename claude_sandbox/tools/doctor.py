"""`claude-sandbox doctor`: every host fact the sandbox needs, a row each, with its fix.

The rows are a table (ROWS): a name, whether the launch needs it, and a
probe that returns ok/detail/fix. Probes only read (the namespace probes make
namespaces of the jail's kind the way a launch does, with the core interpreter's
unshare(2), and wait for them to end); nothing here changes the host.
Exit 0 only when every required row is ok.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from claude_sandbox.core import engine, paths
from claude_sandbox.core.errors import SandboxError
from claude_sandbox.install import installer
from claude_sandbox.launch.configure import profiles
from claude_sandbox.launch.facts import hostfacts
from claude_sandbox.tools.doctorinstall import (
    agent_row,
    bundle_row,
    config_row,
    guard_row,
    programs_row,
    shims_row,
    sizes_row,
    venv_row,
)
from claude_sandbox.tools.finding import Finding

TUN = "/dev/net/tun"
TUN_RDEV = os.makedev(10, 200)


def in_pod() -> bool:
    """A Kubernetes pod: the kubelet sets the service's address, or mounts the account."""
    return "KUBERNETES_SERVICE_HOST" in os.environ or \
        os.path.isdir("/var/run/secrets/kubernetes.io")


def tun_fix() -> str:
    if in_pod():
        return ("in a Kubernetes pod: mount the node's /dev/net/tun with a hostPath volume "
                "of type CharDevice (deploy/pod.yaml, docs/how-to/kubernetes.md)")
    return ('add "--device=/dev/net/tun" to runArgs in devcontainer.json '
            "(podman/docker run: --device /dev/net/tun)")


def userns_fix() -> str:
    if in_pod():
        return ("in a Kubernetes pod: securityContext.seccompProfile and appArmorProfile "
                "type Unconfined (deploy/pod.yaml); the node must allow user namespaces "
                "(user.max_user_namespaces > 0)")
    return ("sysctl -w kernel.unprivileged_userns_clone=1 and user.max_user_namespaces>0, or "
            "run the container with a seccomp profile that allows unshare: one made by "
            "deploy/seccomp/make_profile.py (docs/how-to/docker.md)")


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    required: bool
    probe: Callable[[], Finding]


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    required: bool
    ok: bool
    detail: str
    fix: str


def _tool(name: str, package: str) -> Finding:
    found = paths.find_tool(name)
    if found is None:
        return Finding(False, f"{name} not found in {', '.join(paths.SYSTEM_DIRS)}",
                       f"apt-get install {package}")
    return Finding(True, found)


def bwrap_row() -> Finding:
    finding = _tool("bwrap", "bubblewrap")
    if not finding.ok:
        return finding
    info = os.stat(finding.detail)
    if info.st_mode & stat.S_ISUID:
        return Finding(False, f"{finding.detail} is setuid (the sandbox expects user namespaces)",
                       f"chmod u-s {finding.detail}")
    return finding


def userns_row() -> Finding:
    problem = installer.userns_problem()
    if problem:
        return Finding(False, problem, engine.blocker(engine.read(), failed=True) or userns_fix())
    return Finding(True, "unprivileged user + network namespaces work")


def engine_row() -> Finding:
    """What of the engine or the host stops the sandbox even where a namespace can be made
    (an AppArmor profile that refuses mount), or before (a seccomp profile)."""
    why = engine.blocker(engine.read())
    if why is not None:
        what, _, fix = why.partition("; ")
        return Finding(False, what, fix)
    return Finding(True, "no engine setting known to stop the sandbox (seccomp, AppArmor, "
                   "gVisor, user-namespace sysctls)")


_NO_NAMESPACE = 126  # the probe's child could not make its namespaces (said on its stderr)


def _jail_namespaces(ids: tuple[int, int]) -> None:
    """In the probe's child before its exec: the user, network and mount namespaces the
    jail's holder makes, made as it makes them (core/views.py), root inside as `ids`.
    Not unshare(1): on hosts that allow user namespaces to named programs only (Ubuntu's
    AppArmor restriction), the launch is allowed through the core interpreter."""
    from claude_sandbox.core import kernel, views

    why = views.own_namespaces(kernel.CLONE_NEWNET, (0, 0), ids)
    if why is not None:
        os.write(2, why.encode() + b"\n")
        os._exit(_NO_NAMESPACE)


# In the probe's child: the tables written and read back through x_tables, as the
# holder writes them (holder.py, `filter`); one line of the answer a line.
_DIRECT = ("from claude_sandbox.jail import iptables, netfilter\n"
           "print('\\n'.join(iptables.write(netfilter.tables())))\n")


def redirect_row() -> Finding:
    """Whether the egress proxy's packet filter (nat REDIRECT, the mark) can be written
    and read back in a namespace of the jail's kind, exactly as a launch does it: through
    x_tables, or where the kernel refuses them, with the nf_tables tools."""
    from claude_sandbox.jail import netfilter

    ids = (os.getuid(), os.getgid())
    try:
        ran = subprocess.run([sys.executable, "-I", "-c", _DIRECT], capture_output=True,
                             text=True, timeout=20, check=False,
                             preexec_fn=lambda: _jail_namespaces(ids))
        if ran.returncode == _NO_NAMESPACE and not ran.stdout:
            return Finding(False, f"cannot make a namespace of the jail's kind: "
                           f"{ran.stderr.strip()}", userns_fix())
        lines = ran.stdout.splitlines()
        if ran.returncode == 0 and lines[:1] in (["ok"], ["unread"]):
            # Written through x_tables: its read-back is the answer, as in a launch.
            netfilter.answer(["written", *lines[1:]] if lines[0] == "ok" else lines)
            return Finding(True, "the redirect to the egress proxy can be written and read "
                           "back (x_tables)")
        _, table, *argv = netfilter.tool_request()
        ran = subprocess.run(argv, input=table, capture_output=True, text=True,
                             timeout=20, check=False,
                             preexec_fn=lambda: _jail_namespaces(ids))
        netfilter.check(["ok", str(ran.returncode), ran.stdout, ran.stderr])
    except SandboxError as error:
        return Finding(False, str(error).removeprefix("egress jail: "),
                       "install the iptables package; on the host, load netfilter's nat "
                       "support (modprobe nf_nat nft_chain_nat, or iptable_nat)")
    except (OSError, subprocess.SubprocessError) as error:
        return Finding(False, f"cannot run iptables in a user namespace: {error}",
                       "install iptables")
    return Finding(True, "the redirect to the egress proxy can be written and read back "
                   "(nf_tables)")


def tun_row() -> Finding:
    try:
        info = os.stat(TUN)
    except FileNotFoundError:
        return Finding(False, f"{TUN} is missing", tun_fix())
    if not stat.S_ISCHR(info.st_mode) or info.st_rdev != TUN_RDEV:
        return Finding(False, f"{TUN} is not the tun device (10:200)", tun_fix())
    try:
        os.close(os.open(TUN, os.O_RDWR))
    except OSError as error:
        return Finding(False, f"{TUN} exists but does not open ({error.strerror}): the "
                       "container's device rules refuse it", tun_fix())
    if stat.S_IMODE(info.st_mode) & 0o006 != 0o006:
        return Finding(False, f"{TUN} is {oct(stat.S_IMODE(info.st_mode))}: rootless pasta "
                       "needs it world read-write", f"chmod 666 {TUN}")
    return Finding(True, f"{TUN} 10:200 mode {oct(stat.S_IMODE(info.st_mode))}")


def pasta_row() -> Finding:
    finding = _tool("pasta", "passt")
    if not finding.ok:
        return finding
    result = subprocess.run([finding.detail, "--version"], capture_output=True, text=True,
                            check=False, timeout=10)
    version = (result.stdout or result.stderr).strip().splitlines()
    text = version[0] if version else "installed (no --version output)"
    # Known quirks of Debian 12's 0.0~git20230309 (measured): it does not exit with
    # its namespace (the jail ends it by -P pidfile) and needs --no-map-gw.
    return Finding(True, f"{finding.detail}: {text} (quirks handled: no exit with the "
                   "namespace, gateway mapped to host loopback unless --no-map-gw)")


def landlock_row() -> Finding:
    from claude_sandbox.inside import landlock

    abi = landlock.abi_version()
    if abi == 0:
        return Finding(False, "Landlock is absent or disabled",
                       "boot with lsm=...,landlock (CONFIG_SECURITY_LANDLOCK=y)")
    if abi < 6:
        return Finding(True, f"ABI {abi}: no signal/abstract-socket scoping (needs 6)")
    return Finding(True, f"ABI {abi}")


def seccomp_row() -> Finding:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError as error:
        return Finding(False, f"cannot read /proc/self/status: {error}",
                       "mount /proc in the container (every runtime does by default)")
    if "Seccomp:" not in text:
        return Finding(False, "the kernel has no seccomp (no Seccomp: in /proc/self/status)",
                       "a kernel built with CONFIG_SECCOMP_FILTER")
    return Finding(True, "seccomp filters supported")


def cgroup_row() -> Finding:
    from claude_sandbox.launch.session import cgroups

    facts = cgroups.probe_cgroups()
    usable = [name for name in ("v2", "v1_pids", "v1_memory") if getattr(facts, name, "")]
    if not usable:
        return Finding(False, "no delegated cgroup: max-pids falls back to RLIMIT_NPROC, "
                       "max-memory to RLIMIT_DATA per process (the tmpfs mounts together "
                       "within it, memfd_create and shmget refused; all processes together "
                       "and shared mappings uncapped)",
                       "delegate a cgroup v2 subtree with the pids and memory controllers")
    memory = "" if facts.v2 or facts.v1_memory else (
        "; max-memory: RLIMIT_DATA per process, the tmpfs mounts within it, memfd refused")
    return Finding(True, f"delegated: {', '.join(usable)}{memory}")


def proc_row() -> Finding:
    """Whether the sandbox can have a /proc of its own (ADR 0002)."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text(errors="replace")
    except OSError as error:
        return Finding(False, f"cannot read /proc/self/mountinfo: {error.strerror}",
                       "mount /proc in the container (every runtime does by default)")
    if hostfacts.proc_mountable(mounts):
        return Finding(True, "the sandbox gets a /proc of its own")
    return Finding(False, "the container masks /proc: the sandbox shows the outer /proc with "
                   "the processes of launch time hidden; processes started outside later "
                   "show their command lines (check 33)",
                   "run the container with --security-opt unmask=/proc/* (podman) or "
                   "--security-opt systempaths=unconfined (docker); in a pod, procMount: "
                   "Unmasked with hostUsers: false (docs/how-to/devcontainer-feature.md)")


ROWS: tuple[Row, ...] = (
    Row("bubblewrap", True, bwrap_row),
    Row("user namespaces", True, userns_row),
    Row("container engine", True, engine_row),
    Row("/dev/net/tun", True, tun_row),
    Row("pasta", True, pasta_row),
    Row("egress redirect", True, redirect_row),
    Row("socat (relays)", False, lambda: _tool("socat", "socat")),
    Row("setpriv (relays)", False, lambda: _tool("setpriv", "util-linux")),
    Row("Landlock", False, landlock_row),
    Row("seccomp", True, seccomp_row),
    Row("private /proc", False, proc_row),
    Row("cgroup delegation", False, cgroup_row),
    Row("shims intact", True, shims_row),
    Row("core venv purity", True, venv_row),
    Row("entry-point guard", True, guard_row),
    Row("configuration", True, config_row),
    Row("compiled programs", False, programs_row),
    Row("launch bundle", False, bundle_row),
    *(Row(f"agent {name}", False, agent_row(name)) for name in profiles.AGENT_NAMES),
    Row("sizes", False, sizes_row),
)


def run(rows: Sequence[Row] = ROWS) -> list[Result]:
    results = []
    for row in rows:
        try:
            finding = row.probe()
        # What a probe meets on a strange host is a failing row, not a traceback.
        except (OSError, SandboxError, subprocess.SubprocessError, ValueError) as error:
            finding = Finding(False, f"probe failed: {error}",
                              "re-run the installer as root (./install.sh); if this row "
                              "still fails, report it with `claude-sandbox doctor --json`")
        results.append(Result(row.name, row.required, finding.ok, finding.detail, finding.fix))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="claude-sandbox doctor")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true")
    form.add_argument("--plain", action="store_true")
    options = parser.parse_args(argv)
    results = run()
    healthy = all(r.ok for r in results if r.required)
    where = "a Kubernetes pod" if in_pod() else "this machine"
    if options.json:
        print(json.dumps({"ok": healthy, "where": where,
                          "rows": [asdict(r) for r in results]}, indent=1))
    elif options.plain:
        for r in results:
            mark = "ok" if r.ok else ("FAIL" if r.required else "warn")
            print(f"[{mark}] {r.name}: {r.detail}")
            if not r.ok:
                print(f"       fix: {r.fix}")
        print(f"{where}: " + ("ok" if healthy else "not ready: fix the FAIL rows above"))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"claude-sandbox doctor ({where})")
        for column in ("check", "", "detail", "fix"):
            table.add_column(column, overflow="fold")
        for r in results:
            mark = "[green]ok[/]" if r.ok else ("[bold red]FAIL[/]" if r.required
                                                else "[yellow]warn[/]")
            table.add_row(r.name, mark, r.detail, r.fix)
        Console().print(table)
        print("ok" if healthy else "not ready: fix the FAIL rows above")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
