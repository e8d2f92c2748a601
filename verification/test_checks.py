"""The numbered checks that run inside the sandbox (catalogue: checks.yaml).

Each test is named test_NN_<name>; its first assertion message is the detail
the table prints on FAIL. A check skips only with a stated reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import hashlib
import json
import os
import resource
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from probes import (
    FACTS,
    connect_error,
    default_gateway,
    dns_query,
    errname,
    forwardable,
    fresh_procfs,
    http_request,
    initial_environ,
    iproute,
    jail_on,
    landlock_abi,
    later_fact,
    layer_absent,
    map_written_code,
    mount_at,
    note,
    ns_id,
    outer_dev,
    outer_pids,
    persists_outside,
    root_uids,
    route_get,
    seccomp_mode,
    status,
    syscall,
    tls_outcome,
    unlisted_name,
    walk,
    writable,
)
from probes import mounts as probe_mounts

from claude_sandbox.core import bundle, paths
from claude_sandbox.install import placed
from claude_sandbox.jail import holder, netfilter
from claude_sandbox.launch.configure import keys, profiles
from claude_sandbox.launch.facts import credentials
from claude_sandbox.launch.planner import environment, mounts

LIBEXEC = paths.LIBEXEC
CORE_PYTHON = f"{paths.CORE_VENV}/bin/python"


def _agent() -> profiles.Profile:
    return profiles.get(FACTS.get("agent", "claude"))


def _home() -> str:
    return str(FACTS.get("home") or os.path.expanduser("~"))


# ---------------------------------------------------------- 01-22 (the predecessor's numbers)

def test_01_is_sandbox() -> None:
    env = initial_environ()
    assert env.get("IS_SANDBOX") == "1", f"IS_SANDBOX={env.get('IS_SANDBOX', '')!r}"
    assert env.get("IS_SANDBOX_AGENT") == _agent().name, \
        f"IS_SANDBOX_AGENT={env.get('IS_SANDBOX_AGENT', '')!r}"


def test_02_no_new_privs() -> None:
    value = status().get("NoNewPrivs")
    assert value == "1", f"NoNewPrivs: {value}"


def test_03_home_allow_list() -> None:
    home = _home()
    info = os.stat(home)
    store = FACTS.get("store_home_id")
    assert store is not None, "the runner did not record the agent's state store"
    assert [info.st_dev, info.st_ino] == list(store), \
        f"$HOME is not {_agent().name}'s state store {FACTS.get('store_home')}"
    seen = [rel for rel in FACTS.get("home_canaries", [])
            if os.path.lexists(os.path.join(home, rel))]
    assert not seen, f"the outer home shows through: ~/{', ~/'.join(seen)}"
    config = os.path.join(home, ".config")
    if os.path.isdir(config):
        outer = [name for name in os.listdir(config) if name not in ("gh", "glab-cli")
                 and persists_outside(os.path.join(config, name))]
        assert not outer, f"~/.config shows the outer {', '.join(outer)}"


def test_04_tokens_scrubbed() -> None:
    env = initial_environ()
    brokered = set(FACTS.get("brokered_variables", ()))
    for name in ("GH_TOKEN", "OPENAI_API_KEY"):
        # A brokered variable holds its sentinel (check 83), never the planted value.
        value = env.get(name, "")
        assert not value or (name in brokered and not _is_real(value)), f"{name} is set inside"


def test_05_display_scrubbed() -> None:
    assert not initial_environ().get("DISPLAY"), "DISPLAY is set inside"


def test_06_no_effective_caps() -> None:
    value = status().get("CapEff", "?")
    assert value.strip("0") == "", f"CapEff: {value}"


def test_07_pid_namespace(request: pytest.FixtureRequest) -> None:
    nspid = status().get("NSpid", "").split()
    if fresh_procfs():
        # A fresh procfs numbers from the sandbox's own namespace: one NSpid entry,
        # and the namespace itself differs from the launcher's.
        note(request, f"own procfs; pid namespace {ns_id('pid')}")
        return
    assert len(nspid) >= 2, f"NSpid: {' '.join(nspid)} (no nested pid namespace)"


@pytest.mark.parametrize("kind", ["ipc"])
def test_08_ipc_namespace(kind: str) -> None:
    outer = FACTS.get(f"{kind}_ns")
    assert outer, f"the runner did not record the outer {kind} namespace"
    assert ns_id(kind) != outer, f"{kind} namespace is the launcher's ({outer})"


@pytest.mark.parametrize("kind", ["uts"])
def test_09_uts_namespace(kind: str) -> None:
    outer = FACTS.get(f"{kind}_ns")
    assert outer, f"the runner did not record the outer {kind} namespace"
    assert ns_id(kind) != outer, f"{kind} namespace is the launcher's ({outer})"


BASIC_DEV = {"null", "zero", "full", "random", "urandom", "tty", "console", "pts", "ptmx",
             "shm", "mqueue", "fd", "stdin", "stdout", "stderr", "core"}


def test_10_private_dev(host) -> None:  # type: ignore[no-untyped-def]
    mount = mount_at("/dev")
    assert mount is not None and mount.fstype in ("tmpfs", "devtmpfs"), \
        f"/dev is not a mount of its own ({mount.fstype if mount else 'no mount'})"
    outer = outer_dev("/dev")
    assert outer is None or os.stat("/dev").st_dev != outer, "/dev is the outer /dev"
    extra = sorted(set(os.listdir("/dev")) - BASIC_DEV)
    assert not extra, f"/dev holds {', '.join(extra)}"
    for name in os.listdir("/dev"):
        assert not host.file(f"/dev/{name}").is_directory or name in BASIC_DEV
        info = os.lstat(f"/dev/{name}")
        assert not stat.S_ISBLK(info.st_mode), f"/dev/{name} is a block device"


def test_11_private_tmp() -> None:
    mount = mount_at("/tmp")
    assert mount is not None and mount.fstype == "tmpfs", "/tmp is not a tmpfs of its own"
    outer = outer_dev("/tmp")
    assert outer is None or os.stat("/tmp").st_dev != outer, "/tmp is the outer /tmp"
    sockets = glob.glob("/tmp/vscode-ipc-*.sock") + glob.glob("/tmp/vscode-git-*.sock")
    assert not sockets, f"IDE sockets visible: {', '.join(sockets)}"
    planted = FACTS.get("outer_tmp_socket")
    if planted:
        assert not os.path.lexists(planted), f"the outer {planted} is visible"


def _absent_or_empty_tmpfs(path: str, request: pytest.FixtureRequest) -> None:
    if not os.path.lexists(path):
        note(request, f"{path} absent")
        return
    mount = mount_at(path)
    assert mount is not None and mount.fstype == "tmpfs", f"{path} is not a masking tmpfs"
    entries = os.listdir(path)
    assert not entries, f"{path} holds {', '.join(sorted(entries))}"


def test_12_run_user_masked(request: pytest.FixtureRequest) -> None:
    _absent_or_empty_tmpfs("/run/user", request)


def test_13_run_secrets_masked(request: pytest.FixtureRequest) -> None:
    _absent_or_empty_tmpfs("/run/secrets", request)


def _nulled(name: str) -> None:
    path = os.path.join(_home(), name)
    assert os.path.lexists(path), f"{path} is not bound (absent)"
    with open(path, "rb") as handle:
        data = handle.read(64)
    assert data == b"", f"{path} is not empty"
    mount = mount_at(path)
    assert mount is not None and mount.readonly, f"{path} is not a read-only bind"


def test_14_netrc_empty() -> None:
    _nulled(".netrc")


def test_15_xauthority_empty() -> None:
    _nulled(".Xauthority")


def test_16_curated_gitconfig() -> None:
    env = initial_environ()
    assert env.get("GIT_CONFIG_GLOBAL") == paths.GITCONFIG_INSIDE, \
        f"GIT_CONFIG_GLOBAL={env.get('GIT_CONFIG_GLOBAL', '')!r}"
    git = shutil.which("git", path="/usr/bin:/bin")
    assert git, "git is not installed"
    result = subprocess.run([git, "config", "user.email"], capture_output=True, text=True,
                            check=False, env=env)
    assert result.returncode == 0 and result.stdout.strip(), "git config user.email has no answer"


def test_17_workspace_scope(request: pytest.FixtureRequest) -> None:
    cwd = os.path.realpath(os.getcwd())
    expected = FACTS.get("workspace") or cwd
    assert cwd == expected, f"started in {cwd}, launched from {expected}"
    mount = mount_at(cwd)
    assert mount is not None and not mount.readonly, f"{cwd} is not a writable mount of its own"
    parent = os.path.dirname(cwd)
    for path in dict.fromkeys([parent, "/workspaces"]):
        if path in FACTS.get("allow_write", ()) or path == cwd:
            continue
        can, _ = writable(path)
        assert not (can and persists_outside(path)), f"{path} is writable through to the outside"
    note(request, f"writable root {cwd}")


def test_18_shim_and_etc_config(host, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    found = shutil.which("claude", path=initial_environ().get("PATH", ""))
    shim = os.path.join(paths.SHIM_DIR, "claude")
    assert found == shim, f"claude on PATH is {found}"
    handle = host.file(shim)
    assert handle.content_string == placed.shim_text("claude"), f"{shim} is not the shim"
    assert handle.uid in root_uids() and handle.mode == 0o755, f"{shim} is not root-owned 0755"
    # Plant a configuration in the workspace that would refuse every launch if
    # it were read, and ask the installed core which file it reads.
    cwd = os.getcwd()
    planted = [os.path.join(cwd, name) for name in ("claude-sandbox.conf", ".claude-sandbox.conf")]
    probe = ("import os; from claude_sandbox.core import paths; from claude_sandbox.launch."
             "configure import config; config.load('claude', {}); "
             "print(paths.CONFIG_FILE)")
    try:
        for path in planted:
            Path(path).write_text("this is not a key\n")
        result = subprocess.run([CORE_PYTHON, "-I", "-c", probe], capture_output=True,
                                text=True, check=False, cwd=cwd)
    finally:
        for path in planted:
            Path(path).unlink(missing_ok=True)
    assert result.returncode == 0, f"the core read a planted file: {result.stderr.strip()[-200:]}"
    assert result.stdout.strip() == "/etc/claude-sandbox.conf", \
        f"the core reads {result.stdout.strip()}"


BLACKHOLES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")


def test_19_jail_routes(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    with iproute() as ipr:
        routes = ipr.get_routes()
    holes = {f"{r.get_attr('RTA_DST')}/{r['dst_len']}" for r in routes if r["type"] == 6}
    missing = [cidr for cidr in BLACKHOLES if cidr not in holes]
    assert not missing, f"partial programming: no blackhole for {', '.join(missing)}"
    defaults = [r for r in routes if r["dst_len"] == 0 and r["type"] == 1
                and r.get_attr("RTA_TABLE") == 254]
    assert defaults, "no default route"


def test_20_jail_behaviour(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    import ipaddress

    with iproute() as ipr:
        targets = ["10.0.0.1", "10.255.255.53", "172.16.0.1", "192.168.1.1", "100.64.0.1",
                   # One address of each other special-purpose class: global unicast only.
                   "0.1.2.3", "192.0.0.9", "198.18.0.1", "192.88.99.1", "224.0.0.251",
                   "239.255.255.250", "240.0.0.1", "255.255.255.255"]
        for addr in ipr.get_addr(family=socket.AF_INET):
            if addr.get_attr("IFA_LABEL") != "lo":
                net = ipaddress.ip_network(f"{addr.get_attr('IFA_ADDRESS')}/{addr['prefixlen']}",
                                           strict=False)
                targets.append(str(net.network_address))
        leaks = [f"{t} ({v})" for t in targets if forwardable(v := route_get(ipr, t))]
        gateway = default_gateway(ipr)
        assert gateway, "no gateway"
        internet = route_get(ipr, "203.0.113.10")
    assert not leaks, f"forwardable: {', '.join(leaks)}"
    # The gateway is the internet's nexthop, never a destination of its own (check 56).
    assert internet == f"unicast via {gateway}", f"the internet is {internet}"


def test_21_codex_package_mask(request: pytest.FixtureRequest) -> None:
    if _agent().name != "codex":
        note(request, f"not codex ({_agent().name})")
        return
    home = _home()
    shared = [path for path in (os.path.join(home, rel) for rel in (".codex", ".codex/packages"))
              if persists_outside(path)]
    assert not shared, f"the outer {', '.join(shared)} is what codex sees"
    note(request, "~/.codex, its package cache included, is the state store's")


def _guarded_dirs() -> list[str]:
    dirs = []
    for directory in FACTS.get("path", []):
        if directory == paths.SHIM_DIR:
            break
        if directory.startswith("/") and os.path.isdir(directory) and writable(directory)[0]:
            dirs.append(directory)
    return list(dict.fromkeys(dirs))


def test_22_entry_point_guard(request: pytest.FixtureRequest) -> None:
    null = os.stat("/dev/null").st_rdev
    dirs = _guarded_dirs()
    for directory in dirs:
        for name in profiles.ENTRY_POINTS:
            path = os.path.join(directory, name)
            assert os.path.lexists(path), f"{path} is not guarded (absent, so it can be planted)"
            info = os.stat(path)
            assert stat.S_ISCHR(info.st_mode) and info.st_rdev == null, f"{path} is not /dev/null"
            mount = mount_at(path)
            assert mount is not None and mount.readonly, f"{path} is not a read-only bind"
    note(request, f"guarded: {', '.join(dirs)}" if dirs
         else "no writable PATH directory ahead of /usr/local/bin")


# ------------------------------------------------------------------ 23+ (ours)

TIOCSTI = 0x5412
HIGH_JUNK = 1 << 32


def _seccomp_probes() -> list[tuple[str, tuple[int, ...]]]:
    read_end, write_end = os.pipe()
    # Arguments chosen so the kernel itself would fail without harm (no such
    # pid, bad fd, bad pointer): only the filter answers EPERM.
    far = 0x3FFFFFFF
    probes = [
        ("ptrace", (16, far, 0, 0)),  # PTRACE_ATTACH to no such pid
        ("process_vm_readv", (far, 0, 0, 0, 0, 0)),
        ("pidfd_getfd", (-1, 0, 0)),
        ("bpf", (-1, 0, 0)),
        ("perf_event_open", (0, 0, -1, -1, 0)),
        ("keyctl", (9999, 0, 0, 0, 0)),
        ("userfaultfd", (-1,)),
        ("io_uring_setup", (0, 0)),
        ("open_by_handle_at", (-1, 0, 0)),
        ("ioctl", (write_end, TIOCSTI, 0)),
        ("ioctl", (write_end, TIOCSTI | HIGH_JUNK, 0)),
    ]
    os.close(read_end)
    return probes


def test_23_seccomp_filter(request: pytest.FixtureRequest) -> None:
    if seccomp_mode() != 2:
        layer_absent("seccomp", f"Seccomp: {seccomp_mode()} in /proc/self/status")
    failures = []
    for name, args in _seccomp_probes():
        _, err = syscall(name, *args)
        if err != 1:  # EPERM
            failures.append(f"{name} -> {errname(err)}")
    assert not failures, f"not refused: {', '.join(failures)}"
    note(request, "Seccomp 2; every probe EPERM")


def test_24_landlock_domain(request: pytest.FixtureRequest) -> None:
    abi = landlock_abi()
    if abi < 6:
        pytest.skip(f"the kernel's Landlock ABI is {abi}: no signal/abstract-socket scoping")
    # Outer processes are not in the sandbox's pid namespace, so kill() cannot
    # name them; pid 1 here is bwrap's init, which runs outside the Landlock
    # domain (the inner stage enters it just before the agent): the scope must stop it.
    try:
        os.kill(1, 0)
        layer_absent("landlock", "kill(1, 0) on bwrap's init, outside the domain, succeeded")
    except PermissionError:
        pass
    evidence = "no outer abstract socket"
    name = FACTS.get("abstract_socket")
    if name:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            try:
                sock.connect("\0" + name)
                pytest.fail(f"connected to the outer abstract socket @{name}")
            except OSError as error:
                evidence = f"abstract socket {errname(error.errno or 0)}"
    note(request, f"ABI {abi}; kill EPERM; {evidence}")


def _cgroup_limit(name: str) -> int | None:
    try:
        line = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for entry in line:
        _, controllers, rel = entry.split(":", 2)
        for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
            path = Path(base + rel) / name
            if path.exists():
                text = path.read_text().strip()
                return None if text == "max" else int(text)
        del controllers
    return None


def test_25_resource_caps(request: pytest.FixtureRequest) -> None:
    core = resource.getrlimit(resource.RLIMIT_CORE)
    if core != (0, 0):
        layer_absent("limits", f"RLIMIT_CORE is {core}")
    wanted_pids = FACTS.get("max_pids")
    if wanted_pids:
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        cgroup = _cgroup_limit("pids.max")
        capped = [v for v in (nproc, cgroup) if v not in (None, resource.RLIM_INFINITY)]
        assert capped and min(capped) <= wanted_pids, f"max-pids {wanted_pids} not in force"
    wanted_memory = FACTS.get("max_memory")
    if wanted_memory:
        data = resource.getrlimit(resource.RLIMIT_DATA)[0]
        cgroup = _cgroup_limit("memory.max")
        capped = [v for v in (data, cgroup) if v not in (None, resource.RLIM_INFINITY)]
        assert capped and min(capped) <= wanted_memory, f"max-memory {wanted_memory} not in force"
    note(request, "RLIMIT_CORE 0")


def _core_site() -> str:
    found = glob.glob(f"{paths.CORE_VENV}/lib/python3*/site-packages")
    assert len(found) == 1, f"no single site-packages under {paths.CORE_VENV}"
    return found[0]


def test_26_launch_venv_purity(host) -> None:  # type: ignore[no-untyped-def]
    site = _core_site()
    dists = sorted(name for name in os.listdir(site) if name.endswith((".dist-info", ".egg-info")))
    assert len(dists) == 1 and dists[0].startswith("claude_sandbox-"), \
        f"distributions: {', '.join(dists) or 'none'}"
    pth = [p for p in walk(site) if p.endswith(".pth")]
    assert not pth, f".pth file: {pth[0]}"
    roots = root_uids()
    # What the launch loads or runs from beside the venv, where installed: the bundle of
    # its modules (ADR 0018), the compiled inner stage and command client (ADR 0017), and
    # a root launch's reader of directory times (ADR 0019).
    beside = [path for path in (bundle.BUNDLE, *(p.target for p in placed.PROGRAMS))
              if os.path.lexists(path)]
    for path in [paths.CORE_VENV, *walk(paths.CORE_VENV), *beside]:
        if os.path.islink(path):
            continue
        handle = host.file(path)
        assert handle.uid in roots, f"{path} is owned by uid {handle.uid}"
        assert not handle.mode & 0o022, f"{path} is group/world-writable ({oct(handle.mode)})"
    for path in (site, os.path.join(site, "claude_sandbox"),
                 os.path.join(site, "claude_sandbox", "__init__.py"), *beside):
        can, evidence = writable(path)
        assert not can, f"writable inside: {evidence}"


def test_28_ipv6_off(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    if not os.path.exists("/proc/net/if_inet6"):
        note(request, "IPv6 is off in the jail")
        return
    import ipaddress

    harmless = [ipaddress.IPv6Network(n) for n in ("fe80::/10", "ff00::/8", "::1/128")]
    with iproute() as ipr:
        addresses = [a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(family=socket.AF_INET6)]
        routes = [f"{r.get_attr('RTA_DST') or '::'}/{r['dst_len']}"
                  for r in ipr.get_routes(family=socket.AF_INET6)
                  if r["type"] == 1]
    bad = [a for a in addresses if not any(ipaddress.ip_address(a) in n for n in harmless)]
    assert not bad, f"global IPv6 address: {', '.join(bad)}"
    stray = [r for r in routes
             if not any(ipaddress.IPv6Network(r, strict=False).subnet_of(n) for n in harmless)]
    assert not stray, f"IPv6 route: {', '.join(stray)}"


METADATA = ("169.254.169.254", "168.63.129.16", "100.100.100.200")


def test_29_metadata_unreachable(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    with iproute() as ipr:
        leaks = [f"{a} ({v})" for a in METADATA if forwardable(v := route_get(ipr, a))]
    assert not leaks, f"forwardable: {', '.join(leaks)}"


def test_30_host_loopback_closed(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    port = int(FACTS["loopback_port"])
    targets = ["127.0.0.1"]
    with iproute() as ipr:
        gateway = default_gateway(ipr)
    if gateway:
        targets.append(gateway)
    reached = [t for t in targets if connect_error(t, port) is None]
    assert not reached, f"the outer 127.0.0.1:{port} answered at {', '.join(reached)}"


def _nameservers(text: str) -> list[str]:
    return [line.split()[1] for line in text.splitlines()
            if line.startswith("nameserver") and len(line.split()) > 1]


def test_31_dns_through_forwarder(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    forwarder = FACTS["dns_forwarder"]
    servers = _nameservers(Path("/etc/resolv.conf").read_text())
    assert servers == [forwarder], f"resolv.conf names {', '.join(servers) or 'nothing'}"
    with iproute() as ipr:
        verdict = route_get(ipr, forwarder)
        assert forwardable(verdict), f"the forwarder {forwarder} is {verdict}"
        import ipaddress

        private = [s for s in FACTS.get("outer_nameservers", [])
                   if ipaddress.ip_address(s).is_private
                   and not ipaddress.ip_address(s).is_loopback]
        leaks = [s for s in private if forwardable(route_get(ipr, s))]
    assert not leaks, f"the outer resolver is reachable directly: {', '.join(leaks)}"


def test_32_readonly_uv_and_agent(request: pytest.FixtureRequest) -> None:
    binary = FACTS.get("real_binary") or os.path.realpath(
        os.path.join(paths.REAL_BIN_DIR, _agent().name))
    targets = [binary]
    local_bin = os.path.join(_home(), ".local/bin")
    targets += [p for p in (os.path.join(local_bin, n) for n in ("uv", "uvx", _agent().name))
                if os.path.lexists(p)]
    for path in targets:
        can, evidence = writable(path)
        assert not can, f"writable inside: {evidence}"
    assert not persists_outside(local_bin), "~/.local/bin is the outer directory"
    note(request, f"read-only: {', '.join(targets)}")


def _proc_opened(pid: int) -> list[str]:
    """What of an outer process's /proc entry opens: its command line, net view,
    environment, memory, maps, root, cwd and descriptors."""
    opened = []
    for entry in ("cmdline", "net/tcp", "net/unix", "maps"):
        try:
            with open(f"/proc/{pid}/{entry}", "rb") as handle:
                if handle.read(1):
                    opened.append(entry)
        except OSError:
            pass
    for entry in ("environ", "mem"):
        try:
            with open(f"/proc/{pid}/{entry}", "rb") as handle:
                if entry == "environ":
                    handle.read(1)
            opened.append(entry)
        except OSError:
            pass
    for entry in ("root", "cwd"):
        try:
            os.listdir(f"/proc/{pid}/{entry}")
            opened.append(entry)
        except OSError:
            pass
    try:
        # Listing fd/ needs only the directory's mode; following an entry needs access.
        for fd in os.listdir(f"/proc/{pid}/fd")[:3]:
            os.readlink(f"/proc/{pid}/fd/{fd}")
            opened.append("fd")
            break
    except OSError:
        pass
    return opened


def test_33_outer_proc_closed(request: pytest.FixtureRequest) -> None:
    if fresh_procfs():
        note(request, "own procfs: no outer process is visible")
        return
    pids = {"decoy": int(FACTS["decoy_pid"]), "launcher": int(later_fact("launcher_pid"))}
    opened = [f"{who} {entry}" for who, pid in pids.items() for entry in _proc_opened(pid)]
    assert not opened, f"readable: {', '.join(opened)}"
    others = [f"{pid} {', '.join(got)}" for pid in outer_pids() if (got := _proc_opened(pid))]
    # Those are processes started outside after the launch: a masked /proc gives the
    # sandbox no /proc of its own, and only what existed at launch could be hidden.
    assert not others, (
        f"outer processes open: {'; '.join(others[:4])}; the container masks /proc, so "
        "processes started outside after the launch show: run it with --security-opt "
        "unmask=/proc/* (podman) or systempaths=unconfined (docker), "
        "docs/how-to/devcontainer-feature.md")
    prefix, digest = str(FACTS.get("canary_prefix", "")), str(FACTS.get("canary_sha256", ""))
    for name in os.listdir("/proc"):
        try:
            text = Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        for word in text.replace("=", "\0").split("\0"):
            if prefix and word.startswith(prefix):
                assert hashlib.sha256(word.encode()).hexdigest() != digest, \
                    f"the decoy's secret is on a readable command line (/proc/{name})"
    note(request, "closed: the launcher, a decoy with a secret on its command line and in its "
         "environment, every outer process (cmdline, net, environ, maps, mem, fd, root, cwd)")


def test_34_readonly_config() -> None:
    targets = [paths.CONFIG_FILE, *(os.path.join(paths.SHIM_DIR, n) for n in profiles.ENTRY_POINTS),
               f"{paths.CORE_VENV}/bin", _core_site(), f"{LIBEXEC}/verification",
               f"{LIBEXEC}/real", LIBEXEC]
    for path in targets:
        can, evidence = writable(path)
        assert not can, f"writable inside: {evidence}"


def _connects(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


def test_36_engine_sockets_masked(request: pytest.FixtureRequest) -> None:
    outer = FACTS.get("runtime_sockets", [])
    reached = [path for path in (*mounts.RUNTIME_SOCKETS, *outer)
               if os.path.lexists(path) and _connects(path)]
    assert not reached, f"connected to {', '.join(reached)}"
    note(request, f"not connectable: {', '.join(outer)}" if outer
         else "no engine socket on this host")


def test_37_environment_allow_list() -> None:
    profile = _agent()
    allowed = {"HOME", "USER", "LOGNAME", "PATH", "SHELL", "IS_SANDBOX", "IS_SANDBOX_AGENT",
               "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_DISCOVERY_ACROSS_FILESYSTEM",
               *environment.PASSED_THROUGH, *environment.CONNECTION,
               *(environment.PROXIES if not FACTS.get("egress_jail", True) else ()),
               *(name for name, _ in profile.env), *FACTS.get("pass_env", []),
               # brokered credentials hold sentinels (check 83), and tools trust the broker
               *FACTS.get("brokered_variables", []),
               *(credentials.TRUST_VARIABLES if FACTS.get("brokered_variables") or
                 FACTS.get("brokered_files") else ()),
               # set by a shell between bwrap and the program (a `shell -- sh -c` command)
               "PWD", "OLDPWD", "SHLVL", "_"}
    if profile.tmp_variable:
        allowed.add(profile.tmp_variable)
    env = initial_environ()
    extra = sorted(n for n in env if n not in allowed and n not in keys.LOCALE)
    assert not extra, f"not on the allow-list: {', '.join(extra)}"
    prefix = FACTS.get("canary_prefix", "csbx-canary-")
    carrying = sorted(n for n, v in env.items() if prefix in v)
    assert not carrying, f"the planted canary rides in {', '.join(carrying)}"


def test_38_capability_sets_empty(request: pytest.FixtureRequest) -> None:
    fields = status()
    # CapBnd stays full under bwrap as root; NoNewPrivs (check 02) is what stops
    # uid 0 regaining capabilities on execve, so the bounding set is only noted.
    names = ["CapPrm", "CapInh", "CapAmb"]
    held = [f"{n} {fields.get(n)}" for n in names if fields.get(n, "0").strip("0")]
    assert not held, f"capabilities held: {', '.join(held)}"
    note(request, f"CapBnd {fields.get('CapBnd')}")


def test_39_forge_config_readonly(request: pytest.FixtureRequest) -> None:
    present = []
    for rel in mounts.FORGE_CONFIG:
        path = os.path.join(_home(), rel)
        if os.path.isdir(path):
            present.append(path)
            can, evidence = writable(path)
            assert not can, f"writable inside: {evidence}"
    note(request, f"read-only: {', '.join(present)}" if present else "no forge config here")


# Written in the outer home, each of these runs or configures a program outside later.
OUTER_HOME_PLANTS = (
    "", ".bashrc", ".profile", ".zshrc", ".gitconfig", ".npmrc", ".ssh", ".config",
    ".config/autostart", ".config/systemd", ".local/bin", ".local/share",
    ".local/share/applications", ".local/share/claude", ".local/share/uv/tools",
    ".local/state", ".cache", ".cache/uv", ".npm", ".claude", ".claude/settings.json",
    ".claude.json", ".codex", ".codex/config.toml", ".codex/packages", ".pi",
    ".pi/agent/extensions",
)


def test_40_persistence_masks(request: pytest.FixtureRequest) -> None:
    home = _home()
    reached = []
    for rel in OUTER_HOME_PLANTS:
        path = os.path.join(home, rel) if rel else home
        probe = path
        while not os.path.lexists(probe) and probe != "/":
            probe = os.path.dirname(probe)
        if writable(probe)[0] and persists_outside(probe):
            reached.append(f"~/{rel}")
    assert not reached, f"a write here reaches the outer home: {', '.join(reached)}"
    note(request, f"{len(OUTER_HOME_PLANTS)} places under $HOME: writes stay in the state store")


def test_41_nesting_marker() -> None:
    mount = mount_at(paths.INSIDE_MARKER)
    assert mount is not None and mount.readonly, f"{paths.INSIDE_MARKER} is not a read-only mount"
    result = subprocess.run(
        [CORE_PYTHON, "-I", "-c",
         "from claude_sandbox.core import guard; print(guard.inside_sandbox())"],
        capture_output=True, text=True, check=False)
    assert result.stdout.strip() == "True", f"the core's guard says {result.stdout.strip()!r}"


def test_42_gitconfig_readonly() -> None:
    can, evidence = writable(paths.GITCONFIG_INSIDE)
    assert not can, f"writable inside: {evidence}"
    system = initial_environ().get("GIT_CONFIG_SYSTEM")
    assert system == "/dev/null", f"GIT_CONFIG_SYSTEM={system!r}"


def test_43_local_bin_last(request: pytest.FixtureRequest) -> None:
    entries = [e for e in initial_environ().get("PATH", "").split(":") if e]
    local_bin = os.path.join(_home(), ".local/bin")
    assert entries and entries[-1] == local_bin, f"PATH ends with {entries[-1] if entries else ''}"
    workspace = FACTS.get("workspace") or os.getcwd()
    risky = []
    for entry in entries:
        if entry in ("/usr/bin", "/bin"):
            break
        inside_workspace = entry == workspace or entry.startswith(workspace.rstrip("/") + "/")
        if os.path.isdir(entry) and writable(entry)[0] and persists_outside(entry) \
                and not inside_workspace:
            risky.append(entry)
    assert not risky, f"writable and persistent ahead of /usr/bin: {', '.join(risky)}"


def test_44_agent_tmp_private(request: pytest.FixtureRequest) -> None:
    profile = _agent()
    if not profile.tmp_variable:
        note(request, f"{profile.name} has no scratch directory")
        return
    path = initial_environ().get(profile.tmp_variable, "")
    assert path, f"{profile.tmp_variable} is not set"
    info = os.stat(path)
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700, \
        f"{path} is {oct(stat.S_IMODE(info.st_mode))}"
    assert info.st_uid == os.getuid(), f"{path} is owned by uid {info.st_uid}"


def test_45_terminal_isolated(request: pytest.FixtureRequest) -> None:
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError as error:
        note(request, f"no controlling terminal ({errname(error.errno or 0)})")
        return
    try:
        rdev = os.fstat(fd).st_rdev
    finally:
        os.close(fd)
    outer = FACTS.get("outer_tty_rdev")
    if outer is None or rdev != int(outer):
        note(request, "the sandbox has its own terminal")
        return
    read_end, write_end = os.pipe()
    try:
        _, err = syscall("ioctl", write_end, TIOCSTI, 0)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert err == 1, "the sandbox holds the launching terminal and TIOCSTI is not refused"
    note(request, "TIOCSTI refused by seccomp")



def test_46_kernel_knobs_readonly() -> None:
    # Opening for writing is the test: nothing is written even where it would succeed.
    opened = []
    for path in ("/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger"):
        try:
            fd = os.open(path, os.O_WRONLY)
        except OSError:
            continue
        os.close(fd)
        opened.append(path)
    assert not opened, f"open for writing: {', '.join(opened)}"


def test_47_jail_network_locked(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    from pyroute2.netlink.exceptions import NetlinkError

    # Both attempts would change nothing that matters if they were allowed:
    # a blackhole for a documentation range, the interface's own MTU again.
    allowed = []
    with iproute() as ipr:
        try:
            ipr.route("add", dst="198.51.100.0/24", type="blackhole")
            allowed.append("adding a route")
        except NetlinkError as error:
            assert error.code == errno.EPERM, f"adding a route: {errname(error.code)}"
        for link in ipr.get_links():
            if link.get_attr("IFLA_IFNAME") == "lo":
                continue
            try:
                ipr.link("set", index=link["index"], mtu=link.get_attr("IFLA_MTU"))
                allowed.append(f"changing {link.get_attr('IFLA_IFNAME')}")
            except NetlinkError as error:
                assert error.code == errno.EPERM, f"changing a link: {errname(error.code)}"
    assert not allowed, f"allowed inside the jail: {', '.join(allowed)}"
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR)
    except OSError:
        return
    os.close(fd)
    raise AssertionError("/dev/net/tun opens inside the sandbox")


def test_50_harsh_no_exec_where_writable(request: pytest.FixtureRequest) -> None:
    level = FACTS["hardening"]
    if level != "harsh":
        note(request, f"hardening = {level}: the operator lets what the sandbox writes run")
        return
    subprocess.run(["/bin/true"], check=True, timeout=30)  # read-only binaries still run
    ran, refused = [], []
    for directory in (FACTS["workspace"], os.environ.get("HOME", FACTS["home"]), "/tmp"):
        # Two layers refuse it: Landlock's EXECUTE rule and the noexec mount (check 90);
        # the kernel tests take Landlock's alone.
        handle, copy = tempfile.mkstemp(prefix=".csbx-check-50-", dir=directory)
        try:
            with open("/bin/true", "rb") as source, os.fdopen(handle, "wb") as target:
                shutil.copyfileobj(source, target)
            os.chmod(copy, 0o755)
            subprocess.run([copy], check=False, timeout=30)
            ran.append(directory)
        except PermissionError as error:
            assert error.errno == errno.EACCES, f"{directory}: {errname(error.errno or 0)}"
            refused.append(directory)
        finally:
            os.unlink(copy)
    assert not ran, f"a binary written here ran: {', '.join(ran)}"
    note(request, f"EACCES in {', '.join(refused)}")


def test_51_state_store_home(request: pytest.FixtureRequest) -> None:
    home = _home()
    info = os.stat(home)
    assert info.st_uid == os.getuid(), f"$HOME is owned by uid {info.st_uid}"
    assert stat.S_IMODE(info.st_mode) == 0o700, f"$HOME is {oct(stat.S_IMODE(info.st_mode))}"
    store = str(FACTS.get("store_home", ""))
    # The store's own path outside: not reachable from inside (another agent's store is
    # beside it), except where that path is inside $HOME, which is the store itself.
    parent = os.path.dirname(os.path.dirname(store))
    if parent and not parent.startswith(home + "/"):
        assert not os.path.exists(parent), f"the stores' directory {parent} is visible"
    for other in profiles.AGENT_NAMES:
        if other == _agent().name:
            continue
        sibling = os.path.join(parent, other)
        assert not (os.path.exists(sibling) and persists_outside(sibling)), \
            f"{other}'s store is reachable at {sibling}"
    note(request, f"$HOME is the store {store}")


def _control_paths() -> list[str]:
    workspace = str(FACTS.get("workspace") or os.getcwd())
    return [os.path.join(workspace, rel) for rel in FACTS.get("controls", [])]


def test_52_control_files_readonly(request: pytest.FixtureRequest) -> None:
    workspace = str(FACTS.get("workspace") or os.getcwd())
    open_to_writes = []
    held = 0
    links = 0
    for path in [*_control_paths(), os.path.join(workspace, ".git")]:
        if os.path.islink(path):
            # A link staying in the workspace is held through its target; the link itself
            # is put back by the launcher when the session ends (controlfiles.py).
            links += 1
            path = os.path.realpath(path)
            assert path.startswith(workspace.rstrip("/") + "/"), \
                f"a control path links out of the workspace, to {path}, and the launch ran"
        if os.path.isdir(path) and not os.path.islink(path):
            mount = mount_at(path)
            assert mount is not None and mount.fstype == "overlay", \
                f"{path} is not an overlay (the agent would write the real one)"
            held += 1
            # What a link in it names elsewhere in the workspace is read-only too.
            for top, dirs, files in os.walk(path):
                for name in (*dirs, *files):
                    named = os.path.realpath(os.path.join(top, name))
                    if (os.path.islink(os.path.join(top, name)) and os.path.exists(named)
                            and named.startswith(workspace.rstrip("/") + "/")
                            and not named.startswith(path + "/")):
                        can, evidence = writable(named)
                        if can:
                            open_to_writes.append(f"{evidence} (named by a link in {path})")
            continue
        if not os.path.lexists(path):
            continue  # absent: nothing stands in; the session-end report names it if made
        held += 1
        can, evidence = writable(path)
        if can:
            open_to_writes.append(evidence)
        try:
            os.rename(path, path + ".csbx-moved")
        except OSError:
            pass
        else:
            os.rename(path + ".csbx-moved", path)
            open_to_writes.append(f"{path} could be renamed away")
    assert not open_to_writes, "; ".join(open_to_writes)
    git = shutil.which("git")
    if git and os.path.isdir(os.path.join(workspace, ".git")):
        probe = os.path.join(workspace, f"csbx-commit-{os.getpid()}")
        Path(probe).write_text("x\n")
        had_head = _git(git, workspace, "rev-parse", "-q", "--verify", "HEAD").returncode == 0
        try:
            for argv in (["add", probe], ["commit", "-q", "-m", "csbx probe", "--no-verify"]):
                result = _git(git, workspace, *argv)
                assert result.returncode == 0, f"git {argv[0]} failed: {result.stderr.strip()}"
            undo = ["reset", "-q", "--soft", "HEAD~1"] if had_head else ["update-ref", "-d", "HEAD"]
            _git(git, workspace, *undo)
            _git(git, workspace, "rm", "-q", "--cached", probe)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(probe)
    note(request, f"{held} existing control paths held ({links} through a link); "
         "git add and commit work")


def _git(git: str, workspace: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([git, *argv], cwd=workspace, capture_output=True, text=True,
                          check=False)


def plants(markers: str) -> dict[str, str]:
    """What an agent would write in the workspace for programs outside to run: {path: text}.

    Each names a command that leaves a marker file; the runner then starts the
    real agents outside, in this workspace, and any marker means a plant ran
    (tools/unwrapped.py). Shared with the adversarial suite.
    """
    def touch(name: str) -> str:
        return f"/usr/bin/touch {markers}/{name}"

    hook = {"hooks": [{"type": "command", "command": touch("claude-project-hook")}]}
    return {
        ".claude/settings.json": json.dumps({
            "hooks": {"SessionStart": [hook]}, "env": {"CLAUDE_CODE_SIMPLE": "1"},
            "apiKeyHelper": touch("claude-apikeyhelper")}),
        ".mcp.json": json.dumps({"mcpServers": {"csbx": {
            "type": "stdio", "command": "/usr/bin/touch",
            "args": [f"{markers}/claude-project-mcp"]}}}),
        ".codex/config.toml": f'[mcp_servers.csbx]\ncommand = "/usr/bin/touch"\n'
                              f'args = ["{markers}/codex-project-mcp"]\n',
        ".pi/extensions/csbx.ts": "import { execSync } from 'node:child_process';\n"
                                  f"execSync('{touch('pi-project-extension')}');\n"
                                  "export default function () {}\n",
        ".git/hooks/post-checkout": f"#!/bin/sh\n{touch('git-hook')}\n",
        ".git/config": f"[core]\n\tfsmonitor = {touch('git-fsmonitor')}\n",
        ".vscode/tasks.json": json.dumps({"version": "2.0.0", "tasks": [{
            "label": "csbx", "type": "shell", "command": touch("vscode-task"),
            "runOptions": {"runOn": "folderOpen"}}]}),
        ".devcontainer/devcontainer.json": json.dumps(
            {"image": "x", "postCreateCommand": touch("devcontainer")}),
        ".envrc": touch("direnv") + "\n",
    }


def test_54_workspace_plants_refused(request: pytest.FixtureRequest) -> None:
    workspace = str(FACTS.get("workspace") or os.getcwd())
    markers = os.path.join(workspace, ".csbx-markers")
    os.makedirs(markers, exist_ok=True)
    landed = []
    for relative, text in plants(markers).items():
        path = os.path.join(workspace, relative)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(text)
            landed.append(relative)
        except OSError:
            continue
    request.node.user_properties.append(("markers", markers))
    # Written inside is allowed: git's directory and existing control directories are
    # overlays, and control paths the session makes are moved into the store when it
    # ends (ADR 0010). The verdict is the runner's: it starts the agents outside.
    note(request, f"{len(landed)} of {len(plants(markers))} plants written inside; the "
         "runner starts the agents outside")


def test_55_dns_forwarder_dns_only(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    forwarder = str(FACTS.get("dns_forwarder", paths.DNS_FORWARDER))
    reached = [f"tcp/{port}" for port in (22, 80, 443, 8080)
               if connect_error(forwarder, port) is None]
    assert not reached, f"the DNS forwarder {forwarder} answers {', '.join(reached)}"
    note(request, f"{forwarder}: port 53 only")


def test_56_host_addresses_unreachable(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    host = [str(a) for a in FACTS.get("host_addresses", [])]
    assert host, "the runner found no address of the host"
    with iproute() as ipr:
        routed = [f"{a} ({v})" for a in host if forwardable(v := route_get(ipr, a))]
        own = {str(x.get_attr("IFA_ADDRESS")) for x in ipr.get_addr(family=socket.AF_INET)}
    assert not routed, f"the host is reachable at {', '.join(routed)}"
    listener = FACTS.get("host_listener")
    if listener:
        address, port = str(listener[0]), int(listener[1])
        if address not in own:
            assert connect_error(address, port) is not None, \
                f"a listener on the host's {address}:{port} answered"
    note(request, f"blackholed: {', '.join(host)}")


def test_57_sockets_deny_by_default(request: pytest.FixtureRequest) -> None:
    planted = [str(p) for p in FACTS.get("host_sockets", [])]
    assert planted, "the runner could not plant a socket outside the workspace"
    reached = [path for path in planted if os.path.lexists(path) and _connects(path)]
    assert not reached, f"connected to the host's {', '.join(reached)}"
    for tree in ("/run", "/var/tmp"):
        mount = mount_at(tree)
        assert mount is not None and mount.fstype == "tmpfs", f"{tree} is not a private tmpfs"
    workspace = str(FACTS.get("workspace") or os.getcwd())
    own = os.path.join(workspace, f".csbx-own-{os.getpid()}.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(own)
        server.listen(1)
        assert _connects(own), "a socket the sandbox made in its workspace does not work"
    finally:
        server.close()
        os.unlink(own)
    note(request, f"not connectable: {', '.join(planted)}; /run and /var/tmp private")


def test_58_caps_by_default(request: pytest.FixtureRequest) -> None:
    size = int(FACTS.get("tmpfs_size", 1 << 30))
    for tree in ("/tmp", "/dev/shm", "/run", "/var/tmp"):
        stats = os.statvfs(tree)
        total = stats.f_blocks * stats.f_frsize
        assert 0 < total <= size, f"{tree} holds {total} bytes, more than tmpfs-size {size}"
    adj = Path("/proc/self/oom_score_adj").read_text().strip()
    assert adj == "1000", f"oom_score_adj is {adj}"
    pids = _cgroup_value("pids", "pids.max") or _rlimit(resource.RLIMIT_NPROC)
    memory = _cgroup_value("memory", "memory.max", "memory.limit_in_bytes") or \
        _rlimit(resource.RLIMIT_DATA)
    assert memory, "no memory cap: neither a cgroup limit nor RLIMIT_DATA"
    if not pids:
        assert os.getuid() == 0, "no pids cap: neither a cgroup nor RLIMIT_NPROC"
        note(request, f"memory {memory}; pids: no cgroup here, and RLIMIT_NPROC does not "
             "bind root (the documented fallback)")
        return
    note(request, f"pids {pids}, memory {memory}, tmpfs {size}, oom_score_adj 1000")


def _cgroup_value(controller: str, *names: str) -> int:
    """A limit of this launch's cgroup, 0 when none. Inside, the cgroup namespace hides
    the path, so it is built from the runner's facts: base/claude-sandbox-LAUNCHER_PID."""
    bases = [str(b) for b in FACTS.get("cgroup_bases", {}).get(controller, [])]
    if not bases:
        return 0
    pid = int(later_fact("launcher_pid"))
    for base in bases:
        for name in names:
            try:
                text = Path(base, f"claude-sandbox-{pid}", name).read_text().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < 1 << 60:
                return int(text)
    return 0


def _rlimit(which: int) -> int:
    soft, _ = resource.getrlimit(which)
    return 0 if soft == resource.RLIM_INFINITY else soft


def test_59_root_only_files_hidden(request: pytest.FixtureRequest) -> None:
    planted = [str(p) for p in FACTS.get("root_only", [])]
    readable = []
    for path in ["/etc/shadow", "/etc/gshadow", *planted]:
        if not os.path.lexists(path):
            continue
        try:
            if os.path.isdir(path):
                if os.listdir(path):
                    readable.append(path)
            elif Path(path).read_bytes():
                readable.append(path)
        except OSError:
            continue
    assert not readable, f"readable: {', '.join(readable)}"
    if os.getuid() != 0:
        note(request, "not root: the owner's modes keep these files out")
        return
    forged = " (the walk's cache forged, group-writable: not trusted)" if FACTS.get(
        "forged_cache") else ""
    note(request, f"hidden: /etc/shadow and {len(planted)} file(s) the runner made root-only"
                  f"{forged}")


def test_61_no_inherited_descriptor_inside(request: pytest.FixtureRequest) -> None:
    planted = FACTS.get("inherited_fd") or {}
    target = str(planted.get("path", ""))
    assert target, "the runner planted no inherited descriptor"
    leaked = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == target:
                leaked.append(name)
        except OSError:
            continue
    assert not leaked, f"descriptor(s) {', '.join(leaked)} inside lead to {target}"
    note(request, f"the launcher held descriptor {planted.get('fd')} on {target}; "
                  "nothing inside leads there")


# The trees of / a session is shown (claude_sandbox/launch/planner/reads.py), and the mounts
# every sandbox makes for itself.
SHOWN_ROOTS = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt", "var",
               "sys", "nix", "snap", "gnu", ".dockerenv", "proc", "dev", "tmp", "run"}


def test_72_reads_by_inversion(request: pytest.FixtureRequest) -> None:
    workspace = str(FACTS.get("workspace") or os.getcwd())
    home = str(FACTS.get("home") or os.path.expanduser("~"))
    shown = [workspace, home, *FACTS.get("allow_write", ()), *FACTS.get("allow_read", ()),
             *(p for p in FACTS.get("path", ()) if p.startswith("/"))]

    def on_the_way(directory: str) -> set[str]:
        """The entries of `directory` that lead to a path the sandbox shows."""
        prefix = directory.rstrip("/") + "/"
        return {p[len(prefix):].split("/", 1)[0] for p in shown if p.startswith(prefix)}

    extra = []
    for name in sorted(set(os.listdir("/")) - SHOWN_ROOTS):
        top = f"/{name}"
        if any(p == top or p.startswith(top + "/") for p in shown):
            continue  # walked below
        extra.append(top)
    # Each directory on the way to a shown path holds only what leads there.
    for path in shown:
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):
            directory = "/" + "/".join(parts[:depth])
            if parts[0] in SHOWN_ROOTS or any(directory == p for p in shown):
                break
            try:
                names = set(os.listdir(directory))
            except OSError:
                continue
            extra += [os.path.join(directory, n) for n in sorted(names - on_the_way(directory))]
    assert not extra, f"shown inside, and no part of the sandbox: {', '.join(extra)}"
    others = [h for h in FACTS.get("other_homes", ()) if os.path.lexists(h)
              and not any(p.startswith(h.rstrip("/") + "/") for p in shown)]
    assert not others, f"another user's home is visible: {', '.join(others)}"
    root = mount_at("/")
    assert root is not None and root.readonly, "the sandbox's own root is writable"
    outer = set(FACTS.get("outer_root", ()))
    hidden = sorted(outer - SHOWN_ROOTS - {p.strip("/").split("/")[0] for p in shown})
    note(request, f"/ shows the system trees; hidden: {', '.join('/' + n for n in hidden)}"
         + (f"; {len(FACTS.get('other_homes', ()))} other home(s) absent"
            if FACTS.get("other_homes") else ""))


# ------------------------------------------------------------------ egress by name

# A documentation address (RFC 5737): whatever answers a connection there is the proxy.
FAR = "198.51.100.77"
PROXY_PORTS = (netfilter.PROXY_PORT, netfilter.RESOLVER_PORT)
JAIL_PROCESSES = (holder.NAME, holder.PROXY_NAME)  # their /proc/PID/comm


def _allow_list(request: pytest.FixtureRequest) -> bool:
    """Whether the allow-list checks apply; PASS with a note under open or learn."""
    if not jail_on(request):
        return False
    policy = FACTS.get("egress_policy", "allow-list")
    if policy != "allow-list":
        note(request, f"egress-policy = {policy}: every public name is allowed")
        return False
    return True


def test_75_unlisted_name_refused(request: pytest.FixtureRequest) -> None:
    if not _allow_list(request):
        return
    name = unlisted_name()
    status_code, body = http_request(FAR, 80, name)
    assert status_code == "403", f"HTTP with Host {name}: {status_code} {body[:200]}"
    assert "not on the allow-list" in body and f"allow-domain = {name}" in body, body[:300]
    outcome = tls_outcome(FAR, 443, name)
    assert "ACCESS_DENIED" in outcome.upper(), f"TLS with server name {name}: {outcome}"
    note(request, f"HTTP 403 naming the rule and `allow-domain = {name}`; TLS {outcome}")


def test_76_dns_answers_no_unlisted_name(request: pytest.FixtureRequest) -> None:
    if not _allow_list(request):
        return
    # example.com resolves wherever DNS works, and a failed upstream gives SERVFAIL:
    # NXDOMAIN for it can only be the jail's own refusal.
    servers = [*_nameservers(Path("/etc/resolv.conf").read_text()), FAR, "1.1.1.1"]
    answered = []
    for server in dict.fromkeys(servers):
        for name, tcp in (("example.com", False), (f"{unlisted_name()}.example.com", False),
                          ("example.com", True)):
            rcode, answers = dns_query(server, name, tcp)
            if (rcode, answers) != (3, 0):
                answered.append(f"{name} at {server}{' over TCP' if tcp else ''}: rcode "
                                f"{rcode}, {answers} answers")
    assert not answered, "; ".join(answered)
    note(request, f"NXDOMAIN for example.com and a made-up name at {', '.join(servers)}")


def test_79_other_tcp_needs_its_port_line(request: pytest.FixtureRequest) -> None:
    if not _allow_list(request):
        return
    got = b""
    try:
        with socket.create_connection((FAR, 5432), timeout=15) as sock:
            sock.sendall(b"\x00\x00\x00\x08\x04\xd2\x16\x2f")  # a database's first bytes
            got = sock.recv(100)
    except ConnectionResetError:
        got = b""
    assert got == b"", f"{FAR}:5432 answered {got!r}"
    note(request, f"{FAR}:5432 (no name, no port line): reset before any byte came back")


def test_80_udp_goes_nowhere(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    sent = []
    for port in (443, 4500, 51820):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                sock.sendto(b"\x00" * 32, (FAR, port))
                sent.append(port)
            except PermissionError:
                pass
    assert not sent, f"UDP to {FAR} left on ports {sent}"
    note(request, "UDP other than DNS is refused at the sender (EPERM): QUIC falls back to TCP")


def test_104_icmp_goes_nowhere(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    echo = b"\x08\x00\xf7\xff\x00\x00\x00\x00"  # type 8, code 0, its checksum, id 0, seq 0
    outcomes = []
    for name, kind in (("ping socket", socket.SOCK_DGRAM), ("raw socket", socket.SOCK_RAW)):
        try:
            sock = socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP)
        except OSError as exc:
            outcomes.append(f"{name}: not made ({exc.strerror})")
            continue
        with sock:
            outcomes.append(f"{name}: {_echo_outcome(sock, kind, echo)}")
    note(request, "; ".join(outcomes))


def _echo_outcome(sock: socket.socket, kind: int, echo: bytes) -> str:
    """Send `echo` to FAR and read for 2 s; fails on an echo reply (ICMP type 0)."""
    try:
        sock.sendto(echo, (FAR, 0))
    except OSError as exc:
        return f"refused at the sender ({exc.strerror})"
    deadline = time.monotonic() + 2
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            got = sock.recv(512)
        except OSError as exc:  # an ICMP error back, or the time is up
            return exc.strerror or "no reply"
        # A raw socket's datagram starts with the IP header (and may be the echo itself,
        # seen going out); a ping socket's is the ICMP message alone.
        icmp = got[(got[0] & 0x0F) * 4:] if kind == socket.SOCK_RAW else got
        assert icmp[:1] != b"\x00", f"an echo to {FAR} was answered"
    return "no reply"


def test_81_proxy_out_of_reach(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    # The holder and the proxy are forks of the launcher: they are told by their names.
    seen = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() in JAIL_PROCESSES:
                seen.append(pid)
    assert not seen, f"the jail's own processes are visible: {seen}"
    # Only the proxy's mark skips the redirect; setting it needs CAP_NET_ADMIN.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, netfilter.MARK)
            marked = True
        except PermissionError:
            marked = False
    assert not marked, "the sandbox can mark its sockets past the redirect"
    # A connection to the listener itself has no destination behind it: refused.
    direct = connect_error("127.0.0.1", PROXY_PORTS[0])
    assert direct is not None, "a connection to the proxy's own listener was served"
    note(request, f"no jail process in /proc; SO_MARK refused; the listener: {direct}")


# ---------------------------------------------------------- 83-84 (brokered credentials)
def _is_real(value: str) -> bool:
    """Whether `value` is one of the real values the launch brokers (by their SHA-256)."""
    import hashlib

    return hashlib.sha256(value.encode()).hexdigest() in set(FACTS.get("brokered_sha256", ()))


def test_83_credentials_are_sentinels(request: pytest.FixtureRequest) -> None:
    variables = list(FACTS.get("brokered_variables", ()))
    files = list(FACTS.get("brokered_files", ()))
    if not variables and not files:
        pytest.skip("no credential is brokered here (credential = VAR, or a forge token)")
    env = initial_environ()
    for name in variables:
        value = env.get(name, "")
        assert value, f"{name} is not set inside"
        assert not _is_real(value), f"{name} holds its real value"
    for path in files:
        text = Path(path).read_text(errors="replace")
        words = {w.strip("'\"") for line in text.splitlines() for w in line.split()}
        real = [w for w in words if _is_real(w)]
        assert not real, f"{path} holds a real token"
    note(request, f"sentinels in {', '.join(variables + files)}")


def test_84_broker_keys_out_of_reach(request: pytest.FixtureRequest) -> None:
    where = str(FACTS.get("tls_dir", ""))
    try:
        names: list[str] | None = os.listdir(where)
    except (FileNotFoundError, PermissionError):
        names = None
    assert names is None, f"the broker's certificates are visible at {where}: {names}"
    note(request, f"{where} is not there inside; the broker's CA keeps no key at all")


# ---------------------------------------------------------- 88 (AF_VSOCK)
def test_88_vsock_refused(request: pytest.FixtureRequest) -> None:
    if FACTS.get("allow_vsock"):
        note(request, "allow-vsock is set: the operator lets AF_VSOCK through")
        return
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
        made = "made"
    except OSError as error:
        made = errno.errorcode.get(error.errno or 0, str(error))
    # EPERM is the filter's; a kernel without vsock says EAFNOSUPPORT, which proves
    # nothing about the sandbox.
    assert made == "EPERM", f"an AF_VSOCK socket: {made}"
    note(request, "socket(AF_VSOCK) is refused by the seccomp filter (EPERM)")


# ---------------------------------------------------------- 89 (one store per sandbox)
def test_89_only_this_agents_store(request: pytest.FixtureRequest) -> None:
    root, canary = str(FACTS.get("store_root", "")), str(FACTS.get("store_canary", ""))
    assert root and canary, "the runner planted no other store home"
    try:
        Path(canary).read_bytes()
        read = "read"
    except OSError as error:
        read = errno.errorcode.get(error.errno or 0, str(error))
    assert read == "ENOENT", f"another agent's login in the store: {read}"
    home = str(FACTS.get("home", ""))
    if root.startswith(home.rstrip("/") + "/"):  # the default: under the outer home
        note(request, f"{root} is under the outer home, which is not here: $HOME is this "
             "agent's own store")
        return
    try:  # a state-dir: covered, whatever it holds outside
        seen = [name for name in os.listdir(root) if not name.startswith(".")]
    except OSError:
        seen = []
    assert not seen, f"the store's other homes are listed: {', '.join(seen)}"
    note(request, f"{root}: covered; only this agent's home, at $HOME")


# ---------------------------------------------------------- 90 (no code from writable places)
def _reachable(point: str) -> bool:
    """Whether this process may walk to a mount point: one below a directory it may not
    enter (podman's storage under a 0700 /var/lib/containers, on a user's launch) holds
    nothing it can write or run, and the late-mount helper leaves it as it is."""
    try:
        os.stat(point)
    except PermissionError:
        return False
    except OSError:
        return True  # anything else: counted, so that the check fails closed
    return True


def test_90_writable_places_are_noexec(request: pytest.FixtureRequest) -> None:
    level = FACTS.get("hardening")
    if level != "harsh":
        note(request, f"hardening = {level}: " + (
            "commands run what they build; the agent's own process is probe A62's"
            if level == "brokered" else "writable places may run code (harsh closes them)"))
        return
    kernel = ("proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue")
    executable = [m.point for m in probe_mounts() if not m.readonly
                  and "noexec" not in m.options and m.fstype not in kernel
                  and _reachable(m.point)]
    assert not executable, f"writable and not noexec: {', '.join(executable)}"
    workspace = str(FACTS.get("workspace") or os.getcwd())
    ran = {way: word for way, word in map_written_code(workspace).items() if word == "ran"}
    assert not ran, f"code written to the workspace ran: {', '.join(ran)}"
    note(request, "every writable mount is noexec; a library or program written there "
         "cannot be mapped executable")


# ---------------------------------------------------------- 91 (max-memory, per process)
def _memory_per_process() -> int:
    """max-memory when the operator set it and no memory cgroup holds it: 0 otherwise."""
    memory = FACTS.get("max_memory")
    if not memory or _cgroup_value("memory", "memory.max", "memory.limit_in_bytes"):
        return 0
    return int(memory)


def test_91_max_memory_without_a_cgroup(request: pytest.FixtureRequest) -> None:
    memory = _memory_per_process()
    if not memory:
        note(request, "max-memory is unset, or a memory cgroup caps the whole sandbox")
        return
    assert _rlimit(resource.RLIMIT_DATA) == memory, "RLIMIT_DATA is not max-memory"
    total = 0
    for tree in ("/tmp", "/dev/shm", "/run", "/var/tmp"):
        stats = os.statvfs(tree)
        total += stats.f_blocks * stats.f_frsize
    assert total <= memory, f"the tmpfs mounts hold {total} bytes, more than max-memory"
    try:
        os.close(os.memfd_create("csbx-91"))
        made = "a memfd"
    except OSError as error:
        made = errname(error.errno or 0)
    assert made == "ENOSYS", f"memfd_create gave {made}, not the filter's ENOSYS"
    shm = ctypes.CDLL(None, use_errno=True).shmget(0, 4096, 0o1000 | 0o600)  # IPC_PRIVATE
    assert shm == -1 and ctypes.get_errno() == errno.ENOSYS, "shmget made a segment"
    can, evidence = writable("/dev")
    assert not can, f"/dev takes files: {evidence}"
    note(request, f"RLIMIT_DATA {memory}; tmpfs together {total}; memfd_create and shmget "
         "refused; /dev takes no files")


# ---------------------------------------------------------- 92 (toolchains of the home)
def test_92_toolchains_read_only(request: pytest.FixtureRequest) -> None:
    toolchains = [str(p) for p in FACTS.get("toolchains", [])]
    secrets = [str(p) for p in FACTS.get("toolchain_secrets", [])]
    missing = [p for p in toolchains if not os.path.isdir(p)]
    assert not missing, f"a toolchain of the home is not there: {', '.join(missing)}"
    writable_ones = [p for p in toolchains if writable(p)[0]]
    assert not writable_ones, f"writable inside: {', '.join(writable_ones)}"
    cargo = os.path.join(_home(), ".cargo", "credentials.toml")
    assert not os.path.exists(cargo) or not persists_outside(cargo), \
        "cargo's credentials are the outer ones"
    read = [p for p in secrets if os.path.exists(p) and Path(p).read_bytes()]
    assert not read, f"a toolchain's credential file reads: {', '.join(read)}"
    note(request, f"read-only: {', '.join(toolchains) or 'none here'}; "
         f"{len(secrets)} credential file(s) empty")


def test_93_upstream_proxy_egress_only(request: pytest.FixtureRequest) -> None:
    if not jail_on(request):
        return
    upstream = str(FACTS.get("upstream_proxy") or "")
    if not upstream:
        note(request, "no proxy variable names an upstream proxy here: the egress proxy "
             "connects directly")
        return
    address, _, port = upstream.rpartition(":")
    error = connect_error(address, int(port))
    assert error is not None, f"the agent reached the upstream proxy {upstream} itself"
    note(request, f"the upstream proxy {upstream} is the egress proxy's alone ({error})")


# ---------------------------------------------- 95, 96 (the cgroup view, codex's config)
def test_95_cgroup_view_private(request: pytest.FixtureRequest) -> None:
    if not os.path.exists("/proc/self/ns/cgroup"):
        note(request, "this kernel has no cgroup namespaces")
        return
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    outside = [line for line in lines if line.split(":", 2)[-1] != "/"]
    assert not outside, f"the host's cgroup paths show: {'; '.join(outside)}"
    note(request, f"{len(lines)} hierarchy line(s), each at /")


def test_96_codex_managed_config_inside(request: pytest.FixtureRequest) -> None:
    if _agent().name != "codex":
        note(request, f"{_agent().name}: codex's managed configuration is not bound")
        return
    from claude_sandbox.launch.planner import codexconfig

    path = paths.CODEX_MANAGED_CONFIG
    can, evidence = writable(path)
    assert not can, f"writable inside: {evidence}"
    text = Path(path).read_text()
    assert codexconfig.SETTING in text.splitlines(), f"{path} does not set {codexconfig.SETTING}"
    assert text == codexconfig.inside(str(FACTS.get("codex_managed_config", ""))), \
        f"{path} is not the operator's file with the sandbox's setting"
    note(request, f"{path}: read-only, {codexconfig.SETTING}, the operator's lines kept")


# ---------------------------------------------------------- 97 (socket address families)
def test_97_other_address_families_refused(request: pytest.FixtureRequest) -> None:
    # AF_PACKET proves the filter: without it the kernel says EPERM (no CAP_NET_RAW); the
    # filter answers EAFNOSUPPORT, as a kernel without the family would.
    tried = {"AF_PACKET": (17, socket.SOCK_DGRAM), "AF_ALG": (38, socket.SOCK_SEQPACKET),
             "AF_BLUETOOTH": (31, socket.SOCK_STREAM), "AF_TIPC": (30, socket.SOCK_RDM),
             "AF_QIPCRTR": (42, socket.SOCK_DGRAM)}
    found = {}
    for name, (family, kind) in tried.items():
        try:
            socket.socket(family, kind).close()
            found[name] = "made"
        except OSError as error:
            found[name] = errno.errorcode.get(error.errno or 0, str(error))
    assert found["AF_PACKET"] == "EAFNOSUPPORT", f"AF_PACKET: {found['AF_PACKET']}"
    made = [name for name, word in found.items() if word != "EAFNOSUPPORT"]
    assert not made, f"sockets of other families: {found}"
    # By type and protocol within IP and netlink: SOCK_PACKET is AF_PACKET by another name.
    for name, args, want in (("AF_INET/SOCK_PACKET", (2, 10, 0), "ESOCKTNOSUPPORT"),
                             ("AF_INET/SCTP", (2, 1, 132), "EPROTONOSUPPORT"),
                             ("NETLINK_GENERIC", (16, 3, 16), "EPROTONOSUPPORT")):
        try:
            socket.socket(*args).close()
            found[name] = "made"
        except OSError as error:
            found[name] = errno.errorcode.get(error.errno or 0, str(error))
        assert found[name] == want, f"{name}: {found[name]}"
    for family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK):
        kind = socket.SOCK_DGRAM if family == socket.AF_NETLINK else socket.SOCK_STREAM
        socket.socket(family, kind).close()  # what programs use still works
    note(request, "unix, IP and netlink sockets work; refused: "
         + ", ".join(f"{name} {word}" for name, word in found.items()))
