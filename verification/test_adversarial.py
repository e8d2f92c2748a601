"""The adversarial suite: fixed escape attempts, each BLOCKED or ESCAPED with evidence.

pytest outcomes map to verdicts (conftest.py / tools/verify.py): pass is
BLOCKED, fail is ESCAPED, a skip whose reason starts "EXPOSED" is a
documented exposure (the workspace is writable by design; the operator
turned the jail off), any other skip names why it could not be attempted.
Attempts never do harm when they succeed: files are opened and closed
without a byte written, a traced process is detached at once, signals are 0.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from probes import (
    FACTS,
    comm,
    connect_error,
    default_gateway,
    dns_query,
    errname,
    fresh_procfs,
    hello_with_extension,
    http_request,
    iproute,
    later_fact,
    layer_absent,
    map_written_code,
    note,
    outer_pids,
    persists_outside,
    seccomp_mode,
    status,
    syscall,
    tls_outcome,
    unlisted_name,
    writable,
)

from claude_sandbox.core import paths
from claude_sandbox.jail import netfilter
from claude_sandbox.launch.configure import profiles
from claude_sandbox.launch.planner import mounts

Req = pytest.FixtureRequest


def _home() -> str:
    return str(FACTS.get("home") or os.path.expanduser("~"))


def _blocked(request: Req, evidence: str) -> None:
    note(request, evidence)


def _outer_or_blocked(request: Req) -> list[int]:
    pids = outer_pids()
    if not pids:
        _blocked(request, "own procfs: no outer process is visible"
                 if fresh_procfs() else "no outer process visible")
    return pids


def _jail_exposed() -> None:
    if not FACTS.get("egress_jail", True):
        pytest.skip("EXPOSED: jail disabled by the operator (the container's network is shared)")


# ------------------------------------------------------------------ other processes

def test_a01_proc_environ_of_outer(request: Req) -> None:
    opened = []
    for pid in _outer_or_blocked(request):
        try:
            Path(f"/proc/{pid}/environ").read_bytes()
            opened.append(f"{pid} ({comm(pid)})")
        except OSError:
            pass
    if opened:
        pytest.fail(f"read environ of {', '.join(opened[:5])}")
    _blocked(request, "environ of every visible outer process refused")


def test_a02_recover_planted_secret(request: Req) -> None:
    prefix = FACTS.get("canary_prefix", "csbx-canary-")
    wanted = FACTS.get("canary_sha256")
    pattern = re.compile(re.escape(prefix).encode() + rb"[0-9a-f]{32}")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        for entry in ("environ", "cmdline"):
            try:
                data = Path(f"/proc/{name}/{entry}").read_bytes()
            except OSError:
                continue
            for match in pattern.findall(data):
                if hashlib.sha256(match).hexdigest() == wanted:
                    pytest.fail(f"recovered the secret from /proc/{name}/{entry}")
    for path in ("/proc/self/environ",):
        assert prefix.encode() not in Path(path).read_bytes()
    _blocked(request, "the canary is in no readable environ or cmdline")


def test_a03_reopen_outer_fds(request: Req) -> None:
    got = []
    for pid in _outer_or_blocked(request):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd")[:4]:
                os.close(os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK))
                got.append(f"{pid}/fd/{fd} ({comm(pid)})")
                break
        except OSError:
            continue
    if got:
        pytest.fail(f"reopened {', '.join(got[:5])}")
    _blocked(request, "no outer descriptor could be reopened")


def test_a04_proc_root_traversal(request: Req) -> None:
    got = []
    for pid in _outer_or_blocked(request):
        try:
            entries = os.listdir(f"/proc/{pid}/root{_home()}")
            can, _ = writable(f"/proc/{pid}/root{_home()}")
            got.append(f"/proc/{pid}/root ({comm(pid)}): outer $HOME "
                       f"{'WRITABLE' if can else 'readable'}, {len(entries)} entries")
        except OSError:
            continue
    if got:
        pytest.fail("; ".join(got[:3]))
    _blocked(request, "/proc/PID/root of every outer process refused")


def test_a05_proc_mem(request: Req) -> None:
    got = []
    for pid in [*_outer_or_blocked(request), 1]:
        try:
            os.close(os.open(f"/proc/{pid}/mem", os.O_RDONLY))
            if pid != 1 or seccomp_mode() == 2:
                got.append(f"{pid} ({comm(pid)})")
        except OSError:
            continue
    if got:
        pytest.fail(f"opened mem of {', '.join(got)}")
    _blocked(request, "mem of outer processes and bwrap's init refused")


def _ptrace_pid1() -> tuple[int, int]:
    ret, err = syscall("ptrace", 0x4206, 1, 0, 0)  # PTRACE_SEIZE: does not stop the target
    if ret == 0:
        syscall("ptrace", 17, 1, 0, 0)  # PTRACE_DETACH at once
    return ret, err


def test_a06_ptrace_init(request: Req) -> None:
    # bwrap's init (pid 1 here) runs outside the seccomp filter and the Landlock
    # domain: tracing it would be a way out of both layers.
    ret, err = _ptrace_pid1()
    if ret == 0:
        pytest.fail("PTRACE_SEIZE on bwrap's init succeeded (detached at once)")
    _blocked(request, f"PTRACE_SEIZE pid 1: {errname(err)}")


def test_a07_process_vm_readv(request: Req) -> None:
    buf = ctypes.create_string_buffer(8)
    local = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)
    remote = (ctypes.c_void_p * 2)(0x400000, 8)
    ret, err = syscall("process_vm_readv", 1, ctypes.addressof(local), 1,
                       ctypes.addressof(remote), 1, 0)
    if ret >= 0 or err == 14:  # EFAULT: the kernel let us in and only the address was wrong
        pytest.fail(f"process_vm_readv on bwrap's init reached its memory ({errname(err)})")
    _blocked(request, f"process_vm_readv pid 1: {errname(err)}")


def test_a08_pidfd_getfd(request: Req) -> None:
    pidfd, err = syscall("pidfd_open", 1, 0)
    if pidfd < 0:
        _blocked(request, f"pidfd_open pid 1: {errname(err)}")
        return
    try:
        stolen, err = syscall("pidfd_getfd", pidfd, 0, 0)
        if stolen >= 0:
            os.close(stolen)
            pytest.fail("pidfd_getfd took a descriptor from bwrap's init")
    finally:
        os.close(pidfd)
    _blocked(request, f"pidfd_getfd: {errname(err)}")


def test_a09_signal_outside(request: Req) -> None:
    try:
        os.kill(1, 0)
    except PermissionError:
        _blocked(request, "kill(1, 0): EPERM (Landlock signal scope)")
        return
    if landlock_wanted():
        layer_absent("landlock", "kill(1, 0) on bwrap's init succeeded")
    pytest.fail("kill(1, 0) on bwrap's init succeeded")


def landlock_wanted() -> bool:
    ret, _ = syscall("landlock_create_ruleset", 0, 0, 1)
    return ret >= 6


def test_a10_abstract_socket_outside(request: Req) -> None:
    name = FACTS.get("abstract_socket")
    if not name:
        pytest.skip("the runner made no abstract socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect("\0" + name)
        except OSError as error:
            _blocked(request, f"connect @{name}: {errname(error.errno or 0)}")
            return
    if not FACTS.get("egress_jail", True) and not landlock_wanted():
        pytest.skip("EXPOSED: jail off and no Landlock scope: abstract sockets are shared")
    pytest.fail(f"connected to the outer abstract socket @{name}")


def test_a11_sysv_ipc_outside(request: Req) -> None:
    key = FACTS.get("shm_key")
    if not key:
        pytest.skip("the runner could not create a SysV segment")
    libc = ctypes.CDLL(None, use_errno=True)
    ident = libc.shmget(int(key), 0, 0)
    if ident >= 0:
        pytest.fail(f"found the outer SysV segment {key:#x}")
    _blocked(request, f"shmget({key:#x}): {errname(ctypes.get_errno())}")


# ------------------------------------------------------------------ network

def test_a12_host_loopback(request: Req) -> None:
    port = int(FACTS["loopback_port"])
    refused = connect_error("127.0.0.1", port)
    if refused is None:
        _jail_exposed()
        pytest.fail(f"reached the outer 127.0.0.1:{port}")
    _blocked(request, f"127.0.0.1:{port}: {refused}")


def test_a13_host_loopback_via_gateway(request: Req) -> None:
    _jail_exposed()
    port = int(FACTS["loopback_port"])
    with iproute() as ipr:
        gateway = default_gateway(ipr)
    if gateway is None:
        _blocked(request, "no gateway")
        return
    refused = connect_error(gateway, port)
    if refused is None:
        pytest.fail(f"reached the outer 127.0.0.1:{port} through the gateway {gateway}")
    _blocked(request, f"{gateway}:{port}: {refused}")


def test_a14_metadata_service(request: Req) -> None:
    _jail_exposed()
    reached = [a for a in ("169.254.169.254", "168.63.129.16", "100.100.100.200")
               if connect_error(a, 80) is None]
    if reached:
        pytest.fail(f"metadata reached: {', '.join(reached)}")
    _blocked(request, "no metadata address answers")


def test_a15_private_resolver_direct(request: Req) -> None:
    _jail_exposed()
    servers = [s for s in FACTS.get("outer_nameservers", []) if not s.startswith("127.")]
    reached = [s for s in servers if connect_error(s, 53) is None]
    if reached:
        pytest.fail(f"the outer resolver answered directly: {', '.join(reached)}")
    _blocked(request, f"outer resolvers unreachable: {', '.join(servers) or 'none'}")


# ------------------------------------------------------------------ egress by name

FAR = "198.51.100.77"  # a documentation address: only the proxy answers there


def _name_exposed() -> None:
    _jail_exposed()
    policy = FACTS.get("egress_policy", "allow-list")
    if policy != "allow-list":
        pytest.skip(f"EXPOSED: egress-policy = {policy} allows every public name")


def test_a47_dns_tunnel(request: Req) -> None:
    _name_exposed()
    answered = []
    for server in ("169.254.1.53", "1.1.1.1", "8.8.8.8"):
        for tcp in (False, True):
            name = f"{secrets.token_hex(20)}.{unlisted_name().split('.', 1)[0]}.example.com"
            rcode, answers = dns_query(server, name, tcp)
            if (rcode, answers) != (3, 0):
                answered.append(f"{server}{'/tcp' if tcp else ''}: rcode {rcode}")
    if answered:
        pytest.fail(f"made-up names were answered: {', '.join(answered)}")
    _blocked(request, "every made-up name got NXDOMAIN from the jail's resolver")


def test_a48_sni_host_mismatch(request: Req) -> None:
    _name_exposed()
    outcome = tls_outcome(FAR, 443, unlisted_name())
    if "ACCESS_DENIED" not in outcome.upper():
        pytest.fail(f"TLS with an unlisted server name: {outcome}")
    twice = (f"GET / HTTP/1.1\r\nHost: {FACTS.get('allowed_name') or 'x.invalid'}\r\n"
             f"Host: {unlisted_name()}\r\n\r\n")
    with socket.create_connection((FAR, 80), timeout=15) as sock:
        sock.sendall(twice.encode())
        reply = sock.recv(100)
    if not reply.startswith(b"HTTP/1.1 403"):
        pytest.fail(f"HTTP with two Host headers: {reply!r}")
    _blocked(request, f"TLS {outcome}; two Host headers: 403")


def test_a70_encrypted_client_hello(request: Req) -> None:
    import ssl

    _name_exposed()
    allowed = FACTS.get("allowed_name") or "registry.npmjs.org"
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname=allowed)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    hello, refused = outgoing.read(), []
    for kind in (0xFE0D, 0xFFCE):  # encrypted_client_hello, and the draft ESNI
        with socket.create_connection((FAR, 443), timeout=15) as sock:
            sock.sendall(hello_with_extension(hello, kind, secrets.token_bytes(64)))
            reply = sock.recv(100)
        # A fatal access_denied alert (21, then level 2, description 49) is the refusal.
        if not (reply[:1] == b"\x15" and reply[-2:] == b"\x02\x31"):
            pytest.fail(f"a hello for {allowed} with extension {kind:#06x} got {reply[:16]!r}")
        refused.append(f"{kind:#06x}")
    _blocked(request, f"hellos for {allowed} carrying {', '.join(refused)}: access_denied")


def test_a71_second_request_for_another_site(request: Req) -> None:
    _name_exposed()
    allowed = FACTS.get("allowed_name") or "registry.npmjs.org"
    pipelined = (f"HEAD / HTTP/1.1\r\nHost: {allowed}\r\n\r\n"
                 f"HEAD / HTTP/1.1\r\nHost: {unlisted_name()}\r\n\r\n").encode()
    got = b""
    with socket.create_connection((FAR, 80), timeout=20) as sock:
        sock.sendall(pipelined)
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                got += chunk
    answers = len(re.findall(rb"(?:^|\r\n)HTTP/1\.[01] \d{3}", got))
    if answers > 1:
        pytest.fail(f"the second request, for an unlisted site, was answered: {got[:200]!r}")
    _blocked(request, f"{answers} answer(s): the connection ended at the second request")


def test_a49_ipv6_and_mapped_addresses(request: Req) -> None:
    _name_exposed()
    status_code, body = http_request(f"::ffff:{FAR}", 80, unlisted_name(), socket.AF_INET6)
    if status_code != "403":
        pytest.fail(f"the IPv4-mapped address: {status_code} {body[:100]}")
    v6 = http_request("2001:db8::1", 80, unlisted_name(), socket.AF_INET6)
    if v6[0] not in ("-", "403"):
        pytest.fail(f"IPv6 reached something: {v6}")
    _blocked(request, f"mapped address: 403; IPv6: {v6[1][:80] or v6[0]}")


def test_a50_raw_ip(request: Req) -> None:
    _name_exposed()
    status_code, body = http_request(FAR, 80, FAR)
    if status_code != "403":
        pytest.fail(f"HTTP by number: {status_code} {body[:100]}")
    import ssl

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (socket.create_connection((FAR, 443), timeout=15) as raw,
              context.wrap_socket(raw)):  # no server name at all
            pytest.fail("TLS without a server name was served")
    except (OSError, ssl.SSLError) as error:
        outcome = str(getattr(error, "reason", "") or error)
    _blocked(request, f"by number: 403; TLS without a server name: {outcome}")


def test_a51_proxy_upstream_side(request: Req) -> None:
    _jail_exposed()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, netfilter.MARK)
            pytest.fail("SO_MARK was set: the redirect could be skipped")
        except PermissionError:
            pass
    ports = (netfilter.PROXY_PORT, netfilter.RESOLVER_PORT)
    served = [port for port in ports if connect_error("127.0.0.1", port) is None]
    if netfilter.PROXY_PORT in served:
        pytest.fail("a connection to the proxy's own listener was served")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(b"x", ("169.254.1.53", 5353))
            pytest.fail("UDP to the forwarder's other ports left")
        except PermissionError:
            pass
    _blocked(request, "SO_MARK refused; the listener resets; the forwarder takes DNS only")


def test_a52_name_resolving_private(request: Req) -> None:
    _jail_exposed()
    reached = []
    for name in ("localhost", "metadata.google.internal", "instance-data.ec2.internal"):
        status_code, _ = http_request(FAR, 80, name)
        if status_code not in ("403", "-"):
            reached.append(f"{name}: {status_code}")
    if reached:
        pytest.fail(f"reached by a name of a private address: {', '.join(reached)}")
    _blocked(request, "each name is refused by the allow-list or by its address class")


def test_a16_container_engine_socket(request: Req) -> None:
    candidates = (*mounts.RUNTIME_SOCKETS, f"/run/user/{os.getuid()}/docker.sock",
                  f"/run/user/{os.getuid()}/podman/podman.sock")
    reached = []
    for path in candidates:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(path)
                reached.append(path)
            except OSError:
                continue
    if reached:
        pytest.fail(f"connected to {', '.join(reached)}")
    _blocked(request, "no engine or system-bus socket connects")


def test_a17_outer_tmp_socket(request: Req) -> None:
    path = FACTS.get("outer_tmp_socket")
    if not path:
        pytest.skip("the runner could not make a socket in the outer /tmp")
    if os.path.exists(path):
        pytest.fail(f"{path} from the outer /tmp is visible")
    _blocked(request, f"{path} not visible")


# ------------------------------------------------------------------ privilege and kernel

def test_a18_setuid_binaries(request: Req) -> None:
    found = [str(p) for d in ("/usr/bin", "/bin", "/usr/sbin", "/usr/lib/dbus-1.0")
             if os.path.isdir(d) for p in Path(d).iterdir()
             if p.is_file() and p.stat().st_mode & stat.S_ISUID]
    if status().get("NoNewPrivs") != "1":
        pytest.fail(f"NoNewPrivs is off and {len(found)} setuid binaries exist")
    mount = "/usr/bin/mount" if os.path.exists("/usr/bin/mount") else "/bin/mount"
    result = subprocess.run([mount, "-t", "tmpfs", "none", "/tmp"], capture_output=True,
                            text=True, check=False)
    if result.returncode == 0:
        pytest.fail("the setuid mount(8) mounted a tmpfs")
    _blocked(request, f"NoNewPrivs 1; {len(found)} setuid files gain nothing; mount(8) refused")


def test_a19_unmount_a_mask(request: Req) -> None:
    target = os.path.join(_home(), ".netrc")
    ret, err = syscall("umount2", int(ctypes.addressof(ctypes.create_string_buffer(
        target.encode()))), 2)
    if ret == 0:
        pytest.fail(f"unmounted the mask over {target}")
    _blocked(request, f"umount {target}: {errname(err)}")


def test_a20_peel_mask_in_nested_userns(request: Req) -> None:
    unshare = "/usr/bin/unshare"
    home = _home()
    script = f"umount -l {home}/.netrc 2>/dev/null || exit 3; wc -c < {home}/.netrc"
    result = subprocess.run([unshare, "-Urm", "sh", "-c", script], capture_output=True,
                            text=True, check=False)
    if result.returncode == 0 and result.stdout.strip() not in ("", "0"):
        pytest.fail(f"a nested namespace peeled the mask: ~/.netrc has {result.stdout.strip()} "
                    "bytes")
    how = "nested user namespaces refused" if result.returncode not in (0, 3) else \
        "the mask is locked to the sandbox's namespace"
    _blocked(request, f"{how} (exit {result.returncode})")


def test_a21_mount_syscall(request: Req) -> None:
    result = subprocess.run(["/usr/bin/python3", "-I", "-c", (
        "import ctypes,os;l=ctypes.CDLL(None,use_errno=True);"
        "r=l.mount(b'none',b'/tmp',b'tmpfs',0,None);print(r,ctypes.get_errno())")],
        capture_output=True, text=True, check=False)
    ret, _, err = result.stdout.strip().partition(" ")
    if ret == "0":
        pytest.fail("mount(2) of a tmpfs succeeded")
    _blocked(request, f"mount(2): {errname(int(err or 0))}")


def test_a22_kernel_interfaces(request: Req) -> None:
    # Opened for writing and closed without a byte written: opening is the breach.
    targets = ["/proc/sysrq-trigger", "/proc/sys/kernel/core_pattern",
               "/proc/sys/kernel/modprobe", "/proc/sys/vm/drop_caches",
               "/sys/kernel/uevent_helper", "/sys/fs/cgroup/cgroup.procs",
               "/sys/kernel/mm/transparent_hugepage/enabled"]  # hostname is per uts namespace
    opened = [path for path in targets if os.path.exists(path) and writable(path)[0]]
    if opened:
        pytest.fail(f"opened for writing: {', '.join(opened)}")
    _blocked(request, "every kernel knob refused writing")


def test_a23_device_nodes(request: Req) -> None:
    path = f"/dev/shm/csbx-mem-{os.getpid()}"
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 1))
    except OSError as error:
        present = [d for d in ("/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/sda",
                               "/dev/net/tun") if os.path.exists(d)]
        if present:
            pytest.fail(f"outer devices visible: {', '.join(present)}")
        _blocked(request, f"mknod /dev/mem: {errname(error.errno or 0)}; no raw devices")
        return
    try:
        with open(path, "rb") as handle:
            handle.read(1)
        pytest.fail("made and read a /dev/mem node")
    except OSError as error:
        _blocked(request, f"made a node but it does not open ({errname(error.errno or 0)})")
    finally:
        os.unlink(path)


def test_a24_kernel_attack_surface(request: Req) -> None:
    if seccomp_mode() != 2:
        layer_absent("seccomp", "no seccomp filter")
    probes = {"bpf": (-1, 0, 0), "perf_event_open": (0, 0, -1, -1, 0),
              "keyctl": (0, -3, 0, 0, 0), "userfaultfd": (0,), "io_uring_setup": (1, 0),
              "open_by_handle_at": (-1, 0, 0), "kexec_load": (0, 0, 0, 0),
              "init_module": (0, 0, 0)}
    reached = [f"{n} {errname(e)}" for n, a in probes.items() if (e := syscall(n, *a)[1]) != 1]
    if reached:
        pytest.fail(f"reached the kernel: {', '.join(reached)}")
    _blocked(request, f"{len(probes)} interfaces: EPERM from the filter")


def test_a25_tiocsti_outer_terminal(request: Req) -> None:
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError as error:
        _blocked(request, f"no controlling terminal ({errname(error.errno or 0)})")
        return
    try:
        same = FACTS.get("outer_tty_rdev") == os.fstat(fd).st_rdev
    finally:
        os.close(fd)
    read_end, write_end = os.pipe()
    _, err = syscall("ioctl", write_end, 0x5412, 0)  # TIOCSTI on a pipe: nothing is injected
    os.close(read_end)
    os.close(write_end)
    if same and err != 1:
        pytest.fail("the sandbox holds the launching terminal and TIOCSTI is not filtered")
    _blocked(request, "its own terminal" if not same else "TIOCSTI refused by seccomp")


def test_a26_hostname(request: Req) -> None:
    name = b"csbx"
    ret, err = syscall("sethostname", ctypes.addressof(ctypes.create_string_buffer(name)), 4)
    if ret == 0:
        if FACTS.get("uts_ns") == os.readlink("/proc/self/ns/uts"):
            pytest.fail("changed the outer hostname")
        _blocked(request, "sethostname changed only the sandbox's own uts namespace")
        return
    _blocked(request, f"sethostname: {errname(err)}")


# ------------------------------------------------------------------ persistence outside

def _persistent_writes(paths_: list[str]) -> list[str]:
    hits = []
    for path in paths_:
        probe = path
        while not os.path.lexists(probe) and probe != "/":
            probe = os.path.dirname(probe)
        if writable(probe)[0] and persists_outside(probe):
            hits.append(path)
    return hits


def _plant_attempt(request: Req, rels: list[str], what: str) -> None:
    home = _home()
    hits = _persistent_writes([os.path.join(home, rel) for rel in rels])
    if hits:
        pytest.fail(f"{what}: writes persist outside at {', '.join(hits)}")
    _blocked(request, f"{what}: writes land on a private tmpfs or are refused")


def test_a27_shell_startup_files(request: Req) -> None:
    _plant_attempt(request, [".bashrc", ".profile", ".bash_profile", ".zshrc"],
                   "shell start-up files")


def test_a28_gitconfig(request: Req) -> None:
    _plant_attempt(request, [".gitconfig", ".config/git"], "the user's gitconfig")


def test_a29_forge_cli_config(request: Req) -> None:
    _plant_attempt(request, [".config/gh", ".config/glab-cli"], "gh/glab config (aliases run code)")


def test_a30_desktop_entries(request: Req) -> None:
    _plant_attempt(request, [".local/share/applications", ".config/autostart",
                             ".config/systemd"], "desktop entries, autostart, user units")


def test_a31_ssh_and_local_bin(request: Req) -> None:
    _plant_attempt(request, [".ssh", ".local/bin", ".npmrc"], "ssh keys, ~/.local/bin, .npmrc")


def test_a32_path_dir_ahead(request: Req) -> None:
    workspace = FACTS.get("workspace") or os.getcwd()
    ahead = []
    for entry in FACTS.get("path", []):
        if entry in ("/usr/bin", "/bin"):
            break
        ahead.append(entry)
    hits = _persistent_writes([e for e in ahead if os.path.isdir(e)])
    outside = [h for h in hits if not (h == workspace or h.startswith(workspace + "/"))]
    if outside:
        pytest.fail(f"a command planted in {', '.join(outside)} would shadow the host's")
    if hits:
        pytest.skip(f"EXPOSED: PATH entries inside the workspace are writable: {', '.join(hits)}")
    _blocked(request, f"{len(ahead)} PATH directories ahead of /usr/bin: none writable outside")


def _append(path: str, text: str) -> bool:
    """Append `text` to `path`, making its directories; whether the write landed."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError:
        return False
    return True


def test_a33_git_hooks_in_workspace(request: Req) -> None:
    """The writes may land inside: git directories and control directories are overlays
    and a control path the session makes is moved to the store when it ends. What counts
    is the real workspace afterwards, confirmed from outside: no new file there, and no
    planted text in a file that was there (tools/adversarial.py)."""
    workspace = str(FACTS.get("workspace") or os.getcwd())
    made, appended = [], []
    for relative, text in (
        (".git/hooks/pre-commit", "#!/bin/sh\necho planted by claude-sandbox verify\n"),
        (".git/config", "[core]\n\thooksPath = .csbx-hooks\n"),
        (".git/commondir", "../.csbx-evil\n"),
        (".claude/settings.json", '{"hooks": {"csbx": []}}\n'),
        (".mcp.json", '{"mcpServers": {"csbx": {}}}\n'),
        (".vscode/tasks.json", '{"tasks": [{"label": "csbx"}]}\n'),
        (".devcontainer/devcontainer.json", '{"postCreateCommand": "csbx-id"}\n'),
    ):
        path = os.path.join(workspace, relative)
        existed = os.path.lexists(path)
        if not _append(path, text):
            continue
        if existed:
            appended.append([path, text])
        else:
            made.append(path)
    try:
        os.rename(os.path.join(workspace, ".git"), os.path.join(workspace, ".git-moved"))
        pytest.fail(f"{workspace}/.git was renamed away: git outside would follow a new one")
    except OSError:
        pass
    request.node.user_properties.append(("planted", made))
    request.node.user_properties.append(("appended", appended))
    _blocked(request, f"{len(made) + len(appended)} control files written inside, none may "
             "reach the real workspace (confirmed outside); .git cannot be swapped")


def test_a34_host_run_code_in_bulk_binds(request: Req) -> None:
    home = _home()
    code_dirs = [".local/share/uv/tools", ".local/share/pipx", ".local/share/nvim",
                 ".local/share/pnpm", ".cache/pre-commit", ".cache/uv", ".cache/pip", ".npm",
                 ".local/share", ".cache"]
    hits = _persistent_writes([os.path.join(home, rel) for rel in code_dirs])
    if hits:
        pytest.fail(f"host-run code is writable and persists: {', '.join(hits)}")
    _blocked(request, "~/.local/share, ~/.cache and ~/.npm inside are the agent's state store")


def test_a40_nested_control_files(request: Req) -> None:
    workspace = str(FACTS.get("workspace") or os.getcwd())
    nested = os.path.join(workspace, f"csbx-nested-{os.getpid()}")
    planted = []
    for relative, text in ((".mcp.json", '{"mcpServers": {}}\n'),
                           (".claude/settings.json", '{"hooks": {}}\n'),
                           (".pi/extensions/csbx.ts", "export default function () {}\n")):
        path = os.path.join(nested, relative)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")
            planted.append(path)
        except OSError:
            continue
    request.node.user_properties.append(("planted", [nested] if planted else []))
    if not planted:
        _blocked(request, "nothing could be created below the workspace's top")
        return
    pytest.skip("EXPOSED: control files below the workspace's top can be created (a mount "
                "holds only what exists); the launcher reports them when the session ends, "
                "and an unwrapped Claude Code runs no project hooks or MCP servers")


def test_a35_other_agent_binary_cache(request: Req) -> None:
    path = os.path.join(_home(), ".local/share/claude")
    hits = _persistent_writes([path])
    if hits:
        pytest.fail(f"{FACTS.get('agent')} can rewrite claude's binary cache at {path}")
    _blocked(request, f"{path}: masked or not bound")


# ------------------------------------------------------------------ the next launch

def test_a36_widen_config(request: Req) -> None:
    targets = [paths.CONFIG_FILE, "/etc", *(os.path.join(paths.SHIM_DIR, n)
                                            for n in profiles.ENTRY_POINTS),
               paths.CORE_VENV, f"{paths.LIBEXEC}/real", "/etc/claude-code",
               "/etc/claude-code/managed-settings.json", "/etc/codex"]
    hits = [t for t in targets if os.path.exists(t) and writable(t)[0]]
    if hits:
        pytest.fail(f"writable: {', '.join(hits)}")
    _blocked(request, "configuration, shims, core and managed settings are read-only")


def test_a37_config_in_workspace(request: Req) -> None:
    cwd = os.getcwd()
    planted = [os.path.join(cwd, n) for n in ("claude-sandbox.conf", ".claude-sandbox.conf")]
    for path in planted:
        Path(path).write_text("allow-write = /\negress-jail = 0\n")
    request.node.user_properties.append(("planted", planted))
    result = subprocess.run(
        [f"{paths.CORE_VENV}/bin/python", "-I", "-c",
         "from claude_sandbox.launch.configure import config; "
         "c = config.load('claude', {}); "
         "print(c.allow_write)"], capture_output=True, text=True, check=False, cwd=cwd)
    if "'/'" in result.stdout:
        pytest.fail("the core read allow-write = / from the workspace")
    pytest.skip("EXPOSED: the planted files stay in the workspace, but the core ignores "
                f"them (allow-write read: {result.stdout.strip() or result.stderr.strip()})")


def test_a38_rewrite_agent_binary(request: Req) -> None:
    real = FACTS.get("real_binary") or os.path.realpath(
        os.path.join(paths.REAL_BIN_DIR, FACTS.get("agent", "claude")))
    can, evidence = writable(real)
    if can:
        pytest.fail(evidence)
    _blocked(request, evidence)


def test_a39_launcher_environ(request: Req) -> None:
    pid = int(later_fact("launcher_pid"))
    if fresh_procfs():
        _blocked(request, "own procfs: the launcher is not visible")
        return
    try:
        Path(f"/proc/{pid}/environ").read_bytes()
    except OSError as error:
        _blocked(request, f"/proc/{pid}/environ: {errname(error.errno or 0)}")
        return
    pytest.fail(f"read the launcher's environ (/proc/{pid}/environ)")


# What A46 plants: files that programs started outside later run or obey. In live mode
# the workspace is the agent's to write, so they land; the defence is that the
# session-end report names each one (confirmed outside, tools/adversarial.py).
RUN_OUTSIDE = {
    "csbx_app.py": "print('app')\n",
    "__pycache__/csbx_app.cpython-311.pyc": "planted bytecode\n",
    ".venv/bin/activate": "touch /tmp/csbx-activate\n",
    ".venv/lib/python3.11/site-packages/csbx.pth": "import os\n",
    ".cargo/config.toml": "[build]\nrustc-wrapper = \"/tmp/csbx-wrapper\"\n",
    ".pdbrc": "import os\n",
    ".npmrc": "script-shell=/tmp/csbx-shell\n",
    ".yarnrc": "yarn-path \"/tmp/csbx-yarn.js\"\n",
    ".pnpmfile.cjs": "module.exports = {}\n",
    "bunfig.toml": "preload = [\"./csbx.ts\"]\n",
    ".lfsconfig": "[lfs]\n\turl = http://csbx.invalid/\n",
}


def test_a46_run_outside_plants_named(request: Req) -> None:
    workspace = str(FACTS.get("workspace") or os.getcwd())
    landed = []
    for relative, text in RUN_OUTSIDE.items():
        if not _append(os.path.join(workspace, relative), text):
            continue
        if relative != "csbx_app.py":  # the source itself is ordinary work
            landed.append(relative)
    request.node.user_properties.append(("reported", landed))
    _blocked(request, f"{len(landed)} files programs outside would run or obey written; "
             "each must be named by the session-end report (confirmed outside)")


# ---------------------------------------------------------- A53-A56: the credential broker
_BROKER_ISSUER = b"claude-sandbox credential broker"


def _real(value: str) -> bool:
    return hashlib.sha256(value.encode()).hexdigest() in set(FACTS.get("brokered_sha256", ()))


def _brokered_or_skip() -> None:
    _jail_exposed()
    if not FACTS.get("brokered_sha256"):
        pytest.skip("no credential is brokered here (credential = VAR, or a forge token)")


def test_a53_read_the_broker(request: Req) -> None:
    """The real values live in the proxy alone: look for it, and for them, in every
    process and environment the sandbox can see."""
    _brokered_or_skip()
    seen, found = [], []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if comm(int(pid)) == "csbx-egress":
            seen.append(pid)
        try:
            fields = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for field in fields:
            value = field.partition(b"=")[2].decode(errors="replace")
            if value and _real(value):
                found.append(pid)
    if seen or found:
        pytest.fail(f"the proxy is visible ({seen}) or a real value is ({found})")
    _blocked(request, "no proxy in /proc, and no real value in any visible environment")


def _certificate_from(name: str) -> bytes | None:
    """The certificate whoever answers TLS for `name` (sent to FAR) presents, or None."""
    import ssl

    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((FAR, 443), timeout=15) as raw, \
                context.wrap_socket(raw, server_hostname=name) as tls:
            return tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None


def test_a54_terminate_an_unrelated_host(request: Req) -> None:
    """Only a credential's own hosts get the broker's certificate."""
    _brokered_or_skip()
    names = [n for n in (FACTS.get("allowed_name"), *FACTS.get("echo", [])[1:2],
                         "unrelated.example.com") if n]
    terminated = [n for n in names if _BROKER_ISSUER in (_certificate_from(n) or b"")]
    if terminated:
        pytest.fail(f"the broker answered TLS for {', '.join(terminated)}")
    _blocked(request, f"no broker certificate for {', '.join(names)}")


def _echoed(headers: dict[str, str]) -> dict[str, str]:
    """What the echo host (verify --echo-host) received for these headers, by name."""
    import json
    import urllib.request

    answer = urllib.request.urlopen(urllib.request.Request(
        f"https://{FACTS['echo'][0]}/", headers=headers), timeout=20)
    received = json.loads(answer.read())["headers"]
    return {h.split(":", 1)[0].lower(): h.split(":", 1)[1].strip() for h in received}


def test_a55_sentinel_in_an_unrewritten_header(request: Req) -> None:
    _brokered_or_skip()
    variable = str(FACTS.get("echo_variable", ""))
    sentinel = os.environ.get(variable, "") if variable else ""
    if not FACTS.get("echo") or not sentinel:
        pytest.skip("needs verify --echo-host with a credential line for that host")
    got = _echoed({"X-Token": sentinel, "Cookie": f"t={sentinel}",
                   "Authorization": f"Bearer {sentinel}"})
    smuggled = [name for name in ("x-token", "cookie") if sentinel not in got.get(name, "")
                or _real(got.get(name, "").removeprefix("t="))]
    if smuggled:
        pytest.fail(f"the real value arrived in {', '.join(smuggled)}")
    _blocked(request, "X-Token and Cookie arrived with the sentinel; only Authorization "
             "was rewritten")


def test_a56_replay_an_earlier_sentinel(request: Req) -> None:
    _brokered_or_skip()
    earlier = str(FACTS.get("earlier_sentinel", ""))
    if not FACTS.get("echo") or not earlier:
        pytest.skip("needs verify --echo-host, whose checks 85-87 make an earlier session")
    got = _echoed({"Authorization": f"Bearer {earlier}"}).get("authorization", "")
    if _real(got.removeprefix("Bearer ")):
        pytest.fail("an earlier session's sentinel was given the real value")
    _blocked(request, "an earlier session's sentinel arrived as it was sent")


def test_a57_vsock(request: Req) -> None:
    if FACTS.get("allow_vsock"):
        pytest.skip("allow-vsock is set: the operator lets AF_VSOCK through")
    try:
        sock = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    except OSError as error:
        if error.errno != 1:  # EPERM is the filter's; EAFNOSUPPORT would prove nothing
            pytest.fail(f"socket(AF_VSOCK) failed with {errname(error.errno or 0)}, not "
                        "the filter's EPERM")
        _blocked(request, "socket(AF_VSOCK): EPERM, the seccomp filter's")
        return
    with sock:
        reached = []
        for attempt, address in (("bind", (0xFFFFFFFF, 52345)), ("connect to the host", (2, 22))):
            try:
                (sock.bind if attempt == "bind" else sock.connect)(address)
                reached.append(attempt)
            except OSError:
                continue
    pytest.fail(f"an AF_VSOCK socket was made ({', '.join(reached) or 'no transport here'})")


def test_a58_multicast_and_broadcast(request: Req) -> None:
    _jail_exposed()
    port = int(FACTS.get("udp_echo_port") or 0)
    if not port:
        pytest.fail("the runner started no UDP echo outside")
    targets = ["224.0.0.1", "239.255.255.250", "255.255.255.255"]
    with iproute() as ipr:
        for addr in ipr.get_addr(family=socket.AF_INET):
            if addr.get_attr("IFA_LABEL") != "lo" and addr.get_attr("IFA_BROADCAST"):
                targets.append(str(addr.get_attr("IFA_BROADCAST")))
                interface = str(addr.get_attr("IFA_ADDRESS"))
                break
        else:
            interface = ""
    sent, echoed = [], []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        if interface:  # out of the jail's own interface, past the route lookup
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF,
                            socket.inet_aton(interface))
        sock.settimeout(1.0)
        for target in targets:
            try:
                sock.sendto(b"csbx-a58", (target, port))
                sent.append(target)
            except OSError:
                continue
        for _ in targets:
            try:
                _, peer = sock.recvfrom(2048)
                echoed.append(peer[0])
            except OSError:
                break
    if echoed:
        pytest.fail(f"the host's UDP echo answered from {', '.join(echoed)}")
    _blocked(request, f"no echo for {', '.join(targets)}"
             + (f" ({len(sent)} sent and refused on the way)" if sent else
                ": every send refused at once"))


def test_a60_another_agents_store(request: Req) -> None:
    canary = str(FACTS.get("store_canary", ""))
    if not canary:
        pytest.fail("the runner planted no other store home")
    found = []
    for path in (canary, os.path.join(_home(), os.path.relpath(canary, str(
            FACTS.get("store_root", "/"))))):
        try:
            found.append(f"{path}: {Path(path).read_text().strip()}")
        except OSError:
            continue
    if found:
        pytest.fail(f"read another agent's login: {'; '.join(found)}")
    _blocked(request, f"{canary} is not there")


def test_a61_ld_preload_and_the_loader(request: Req) -> None:
    level = FACTS.get("hardening")
    if level != "harsh":
        pytest.skip(f"hardening = {level}: only harsh (and brokered's agent, A62) forbid "
                    "running what the sandbox wrote")
    outcome = map_written_code(str(FACTS.get("workspace") or os.getcwd()))
    ran = [way for way, word in outcome.items() if word == "ran"]
    if ran:
        pytest.fail(f"code written to the workspace ran: {', '.join(ran)}")
    _blocked(request, "; ".join(f"{way}: {word}" for way, word in outcome.items()))


def test_a68_memory_only_program(request: Req) -> None:
    level = FACTS.get("hardening")
    if level != "harsh":
        pytest.skip(f"hardening = {level}: only harsh (and brokered's agent, check 65) forbid "
                    "running what the sandbox wrote")
    # Harsh refuses memfd_create itself: whether a program held there would run depends on
    # the program (a multi-call /bin/true exits 1 as "3"), so only the refusal is proof.
    try:
        memfd = os.memfd_create("csbx-a68", 0)
    except OSError as error:
        assert error.errno == 38, f"memfd_create: {errname(error.errno or 0)}, not ENOSYS"
        _blocked(request, "memfd_create: ENOSYS (the filter's)")
        return
    try:
        with open(sys.executable, "rb") as source:
            os.write(memfd, source.read())
        ran = subprocess.run([f"/proc/self/fd/{memfd}", "-c", "print('csbx-a68-ran')"],
                             pass_fds=(memfd,), capture_output=True, text=True, timeout=30,
                             check=False)
        word = "ran" if "csbx-a68-ran" in ran.stdout else f"exit {ran.returncode}"
    except OSError as error:
        word = errname(error.errno or 0)
    finally:
        os.close(memfd)
    pytest.fail(f"memfd_create works under harsh; a program written there: {word}")


_PACKET_AND_ALG = (
    "import errno, socket\n"
    "for name, family, kind, protocol in (('AF_PACKET', 17, socket.SOCK_RAW, 0), "
    "('AF_INET/SOCK_PACKET', 2, 10, 0), ('AF_ALG', 38, socket.SOCK_SEQPACKET, 0), "
    "('NETLINK_GENERIC', 16, socket.SOCK_RAW, 16)):\n"
    "    try:\n"
    "        socket.socket(family, kind, protocol).close()\n"
    "        print(name, 'made')\n"
    "    except OSError as error:\n"
    "        print(name, errno.errorcode.get(error.errno, error.errno))\n")


def test_a69_packet_socket_in_a_nested_namespace(request: Req) -> None:
    # In a user namespace of its own with a network namespace, uid 0 holds CAP_NET_RAW
    # over it: the kernel alone would make the packet socket there.
    unshare = shutil.which("unshare")
    ways = {"directly": [sys.executable, "-I", "-c", _PACKET_AND_ALG]}
    if unshare:
        ways["in a user and network namespace of its own"] = [
            unshare, "--user", "--map-root-user", "--net", *ways["directly"]]
    seen = []
    for way, argv in ways.items():
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            seen.append(f"{way}: not entered ({done.stderr.strip()[-80:]})")
            continue
        words = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
        made = [name for name, word in words.items() if word == "made"]
        if made:
            pytest.fail(f"{way}: {', '.join(made)} made")
        seen.append(f"{way}: " + ", ".join(f"{n} {w}" for n, w in words.items()))
    _blocked(request, "; ".join(seen))


def test_a63_memory_past_max_memory(request: Req) -> None:
    memory = int(FACTS.get("max_memory") or 0)
    if not memory or FACTS.get("cgroup_bases", {}).get("memory"):
        pytest.skip("max-memory is unset, or a memory cgroup caps the whole sandbox")
    held, chunk, notes = 0, b"\0" * (1 << 20), []
    try:
        os.close(os.memfd_create("csbx-a63"))
        pytest.fail("memfd_create made a memfd, which no per-process cap counts")
    except OSError as error:
        notes.append(f"memfd_create: {errname(error.errno or 0)}")
    made = []
    try:
        for tree in ("/dev/shm", "/tmp"):
            path = os.path.join(tree, f".csbx-a63-{os.getpid()}")
            made.append(path)
            with open(path, "wb") as handle:
                try:
                    while held <= memory:
                        handle.write(chunk)
                        handle.flush()
                        held += len(chunk)
                except OSError as error:
                    notes.append(f"{tree}: {errname(error.errno or 0)} at {held >> 20} MiB")
        if held > memory:
            pytest.fail(f"held {held >> 20} MiB in files in memory, past max-memory")
    finally:
        for path in made:
            with contextlib.suppress(OSError):
                os.unlink(path)
    _blocked(request, "; ".join(notes))


def test_a64_thread_cmdline(request: Req) -> None:
    """An outer process hidden at launch starts threads later: each has a /proc/TID of its
    own, never listed, which the late masks could not know."""
    if fresh_procfs():
        _blocked(request, "own procfs: no outer process or thread is reachable")
        return
    wanted = str(FACTS.get("canary_sha256"))
    prefix = str(FACTS.get("canary_prefix", "csbx-canary-")).encode()
    pattern = re.compile(re.escape(prefix) + rb"[0-9a-f]{32}")
    try:
        last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    except (OSError, ValueError):
        last = int(FACTS.get("threads_pid") or 0) + 500
    found = ""
    deadline = time.monotonic() + 3
    while not found and time.monotonic() < deadline:
        for number in range(max(last - 2000, 2), last + 2000):
            try:
                data = Path(f"/proc/{number}/cmdline").read_bytes()
            except OSError:
                continue
            if any(hashlib.sha256(m).hexdigest() == wanted for m in pattern.findall(data)):
                found = f"/proc/{number}/cmdline"
                break
    if found:
        # Measured and documented (docs/explanation/kernel-layers.md): only an unmasked
        # /proc closes it, which gives the sandbox a procfs of its own.
        pytest.skip(f"EXPOSED: the engine masks /proc, and a thread started after the launch "
                    f"is reachable by number ({found}); run the container with /proc "
                    "unmasked (podman --security-opt unmask=/proc/*, Docker --security-opt "
                    "systempaths=unconfined)")
    _blocked(request, "no thread of an outer process was reachable by number")


def test_a65_replace_a_linked_control_path(request: Req) -> None:
    """Dotfile managers make .envrc a link: its target inside the workspace is held, but
    the link is no mount point. Replace it with a file of our own, which direnv outside
    would run; the launcher must put the link back when the session ends (confirmed
    outside: the planted text is not what .envrc holds afterwards)."""
    workspace = str(FACTS.get("workspace") or os.getcwd())
    path = os.path.join(workspace, ".envrc")
    if not os.path.islink(path):
        _blocked(request, ".envrc is not a link in this workspace: nothing to replace")
        return
    text = f"echo planted by claude-sandbox verify {os.getpid()}\n"
    try:
        os.unlink(path)
        Path(path).write_text(text, encoding="utf-8")
    except OSError as error:
        _blocked(request, f"the link could not be replaced ({error.strerror})")
        return
    request.node.user_properties.append(("appended", [[path, text]]))
    _blocked(request, "the link was replaced inside; the launcher must put it back "
             "(confirmed outside)")
