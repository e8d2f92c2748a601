"""Small probes the checks share: facts from outside, /proc parsing, write attempts.

Every probe that could change something is built so it changes nothing on
success either: a file is opened for append and closed without a byte
written; a directory gets an O_EXCL probe file that is removed at once.
That matters because the same checks are also run outside any sandbox, by
the tests that prove each check can fail.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import platform
import re
import secrets
import socket
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
CATALOGUE = yaml.safe_load((HERE / "checks.yaml").read_text(encoding="utf-8"))


class Facts(dict):  # type: ignore[type-arg]
    """The runner's facts: attribute access, and a clear failure for a missing one."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


FACTS = Facts()


def load_facts(path: str) -> None:
    FACTS.clear()
    if path:
        FACTS.update(json.loads(Path(path).read_text(encoding="utf-8")))
    FACTS.setdefault("workdir", os.path.dirname(path) if path else "")


def later_fact(name: str, timeout: float = 10.0) -> Any:
    """A fact the runner can only know after the launch (the launcher's PID)."""
    path = Path(FACTS.get("workdir", "")) / "late.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return json.loads(path.read_text(encoding="utf-8"))[name]
        except (OSError, ValueError, KeyError):
            time.sleep(0.05)
    pytest.fail(f"the runner never wrote {path} with {name}")


# ------------------------------------------------------------------ outcomes

def note(request: pytest.FixtureRequest | None, text: str) -> None:
    """A PASS with a stated detail, e.g. "jail disabled by the operator"."""
    if request is not None:
        request.node.user_properties.append(("detail", text))


def layer_absent(layer: str, what: str) -> None:
    """A layer is not in this sandbox: every check that needs it fails."""
    pytest.fail(f"{what}: the {layer} layer is missing")


def jail_on(request: pytest.FixtureRequest) -> bool:
    """Whether the jail checks apply; PASS with a note when the operator turned it off."""
    if not FACTS.get("egress_jail", True):
        note(request, "jail disabled by the operator")
        return False
    if FACTS.get("net_ns") and ns_id("net") == FACTS["net_ns"]:
        layer_absent("jail", "the sandbox shares the launcher's network namespace")
    return True


# ------------------------------------------------------------------ /proc

def status() -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    return fields


def initial_environ() -> dict[str, str]:
    """The environment this process was started with (pytest adds its own later)."""
    raw = Path("/proc/self/environ").read_bytes()
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if item:
            name, _, value = item.decode(errors="replace").partition("=")
            env[name] = value
    return env


def ns_id(kind: str) -> str:
    return os.readlink(f"/proc/self/ns/{kind}")


@dataclass(frozen=True, slots=True)
class Mount:
    point: str
    fstype: str
    options: frozenset[str]
    root: str

    @property
    def readonly(self) -> bool:
        return "ro" in self.options


def _unescape(text: str) -> str:
    # The kernel escapes space, tab, newline and backslash as \ooo, nothing else.
    return re.sub(r"\\([0-7]{3})", lambda octal: chr(int(octal.group(1), 8)), text)


def mounts() -> list[Mount]:
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape",
              newline="") as handle:  # no newline translation: see claude_sandbox/mountinfo.py
        text = handle.read()
    for line in text.split("\n"):  # only "\n" ends a record
        left, _, right = line.partition(" - ")
        fields = left.split(" ")
        if len(fields) < 6:
            continue
        fstype = right.split(" ")[0]
        found.append(Mount(_unescape(fields[4]), fstype, frozenset(fields[5].split(",")),
                           _unescape(fields[3])))
    return found


def mount_at(path: str) -> Mount | None:
    """The topmost mount whose mount point is exactly `path`."""
    hits = [m for m in mounts() if m.point == path]
    return hits[-1] if hits else None


def mount_of(path: str) -> Mount:
    """The mount that holds `path` (longest mount-point prefix, last wins)."""
    real = os.path.realpath(path)
    best: Mount | None = None
    for m in mounts():
        inside = real == m.point or real.startswith(m.point.rstrip("/") + "/") or m.point == "/"
        if inside and (best is None or len(m.point) >= len(best.point)):
            best = m
    assert best is not None
    return best


# ------------------------------------------------------------------ write attempts

def root_uids() -> frozenset[int]:
    """The uids the outer root shows as here: 0, or the overflow uid where 0 is unmapped.

    Reading uid_map is not enough under nested user namespaces (its second column
    is relative to the parent namespace), so /usr, root-owned on every host we
    support, is the reference.
    """
    reference = os.stat("/usr").st_uid
    if reference == os.getuid() and reference != 0:
        return frozenset({0})  # the user owns /usr: nothing can be called root-owned
    return frozenset({0, reference})


def writable(path: str) -> tuple[bool, str]:
    """Whether `path` can be written, without changing it. Returns (writable, evidence)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False, f"{path}: absent"
    try:
        if stat.S_ISDIR(info.st_mode):
            probe = os.path.join(path, f".csbx-probe-{os.getpid()}")
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)
            os.unlink(probe)
            return True, f"created and removed a file in {path}"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK)
        os.close(fd)
        return True, f"opened {path} for writing"
    except OSError as error:
        return False, f"{path}: {errno.errorcode.get(error.errno or 0, error.errno)}"


def outer_dev(path: str) -> int | None:
    """st_dev of `path` as the runner saw it outside, when it gathered it."""
    value = FACTS.get("outer_devs", {}).get(path)
    return int(value) if value is not None else None


def outer_id(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of `path` as the runner saw it outside, when it gathered it."""
    value = FACTS.get("outer_ids", {}).get(path)
    return (int(value[0]), int(value[1])) if value is not None else None


def persists_outside(path: str) -> bool:
    """Whether a write at `path` would land in the same file outside.

    The same device is not enough: the agent's state store lives on the outer
    file system too, so the inode decides where the runner recorded one.
    """
    try:
        info = os.stat(path)
    except OSError:
        return False
    ident = outer_id(path)
    if ident is not None:
        return ident == (info.st_dev, info.st_ino)
    outside = outer_dev(path)
    return outside is not None and outside == info.st_dev


# ------------------------------------------------------------------ syscalls

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

SYSCALLS = {
    "x86_64": {"ioctl": 16, "ptrace": 101, "keyctl": 250, "perf_event_open": 298,
               "open_by_handle_at": 304, "process_vm_readv": 310, "bpf": 321,
               "userfaultfd": 323, "io_uring_setup": 425, "pidfd_open": 434,
               "pidfd_getfd": 438, "setns": 308, "kexec_load": 246, "init_module": 175,
               "landlock_create_ruleset": 444, "sethostname": 170, "mount": 165,
               "umount2": 166, "unshare": 272, "chroot": 161, "add_key": 248,
               "request_key": 249, "finit_module": 313, "pivot_root": 155},
    "aarch64": {"ioctl": 29, "ptrace": 117, "keyctl": 219, "perf_event_open": 241,
                "open_by_handle_at": 265, "process_vm_readv": 270, "bpf": 280,
                "userfaultfd": 282, "io_uring_setup": 425, "pidfd_open": 434,
                "pidfd_getfd": 438, "setns": 268, "kexec_load": 104, "init_module": 105,
                "landlock_create_ruleset": 444, "sethostname": 161, "mount": 40,
                "umount2": 39, "unshare": 97, "chroot": 51, "add_key": 217,
                "request_key": 218, "finit_module": 273, "pivot_root": 41},
}


def syscall(name: str, *args: int) -> tuple[int, int]:
    """(return value, errno) of a raw system call; args are plain integers."""
    table = SYSCALLS.get(platform.machine())
    if table is None:
        pytest.skip(f"no system-call table for {platform.machine()}")
    ctypes.set_errno(0)
    ret = int(_libc.syscall(ctypes.c_long(table[name]), *[ctypes.c_long(a) for a in args]))
    return ret, ctypes.get_errno() if ret < 0 else 0


def errname(number: int) -> str:
    return errno.errorcode.get(number, str(number)) if number else "success"


def connect_error(address: str, port: int) -> str | None:
    """None when a TCP connection to address:port reaches something, else why it did not.

    In the jail every connect() is answered by the egress proxy on the loopback, so a
    connection that succeeds has reached nothing yet: the proxy resets one it refuses
    by address class (the private network, the host) at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.5)
        try:
            sock.connect((address, port))
            sock.recv(1)
        except TimeoutError:
            return None  # connected, and the other side waits for us: reached
        except ConnectionResetError:
            return "ECONNRESET (refused by the egress proxy)"
        except OSError as error:
            return errname(error.errno or 0) if error.errno else "timed out"
    return None


def http_request(address: str, port: int, host: str,
                 family: int = socket.AF_INET) -> tuple[str, str]:
    """(status, body) of a GET with this Host header; ("-", why) when none came."""
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(15)
            sock.connect((address, port))
            sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                         .encode())
            data = b""
            while len(data) < 65536 and (chunk := sock.recv(65536)):
                data += chunk
    except OSError as error:
        return "-", f"{type(error).__name__}: {error}"
    head, _, body = data.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    return (parts[1].decode() if len(parts) > 1 else "-"), body.decode(errors="replace")


def hello_with_extension(hello: bytes, kind: int, body: bytes) -> bytes:
    """A one-record ClientHello with one more extension at its end, every length fixed:
    a real hello from Python's TLS, carrying what Python itself would not send."""
    message = hello[9:]
    at = 2 + 32
    at += 1 + message[at]
    at += 2 + int.from_bytes(message[at:at + 2], "big")
    at += 1 + message[at]
    extra = kind.to_bytes(2, "big") + len(body).to_bytes(2, "big") + body
    total = int.from_bytes(message[at:at + 2], "big") + len(extra)
    message = message[:at] + total.to_bytes(2, "big") + message[at + 2:] + extra
    handshake = b"\x01" + len(message).to_bytes(3, "big") + message
    return hello[:3] + len(handshake).to_bytes(2, "big") + handshake


def tls_outcome(address: str, port: int, name: str) -> str:
    """What a TLS client with this server name meets: "handshake", or the error."""
    import ssl

    context = ssl.create_default_context()
    try:
        with (socket.create_connection((address, port), timeout=15) as raw,
              context.wrap_socket(raw, server_hostname=name)):
            return "handshake"
    except ssl.SSLError as error:
        return f"{error.reason or error}"
    except OSError as error:
        return f"{type(error).__name__}: {error}"


def dns_query(server: str, name: str, tcp: bool = False) -> tuple[int, int]:
    """(rcode, answer count) of an A query for `name`, over UDP or TCP."""
    query = (secrets.token_bytes(2) + b"\x01\x00\x00\x01" + bytes(6)
             + b"".join(bytes([len(label)]) + label.encode() for label in name.split("."))
             + b"\0\0\1\0\1")
    if tcp:
        with socket.create_connection((server, 53), timeout=10) as sock:
            sock.sendall(len(query).to_bytes(2, "big") + query)
            size = int.from_bytes(sock.recv(2), "big")
            reply = b""
            while len(reply) < size and (chunk := sock.recv(size - len(reply))):
                reply += chunk
    else:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(10)
            sock.sendto(query, (server, 53))
            reply = sock.recv(4096)
    return reply[3] & 15, int.from_bytes(reply[6:8], "big")


def unlisted_name() -> str:
    """A name no allow-list holds and no resolver knows (RFC 6761 .invalid)."""
    return f"csbx-{secrets.token_hex(6)}.unlisted.invalid"


def landlock_abi() -> int:
    ret, _ = syscall("landlock_create_ruleset", 0, 0, 1)
    return max(ret, 0)


def seccomp_mode() -> int:
    return int(status().get("Seccomp", "0"))


# ------------------------------------------------------------------ routes

def iproute() -> Any:
    from pyroute2 import IPRoute

    return IPRoute()


def route_get(ipr: Any, address: str) -> str:
    """How the kernel would route `address`: "unicast via GW dev N", or the refusal."""
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        answer = ipr.route("get", dst=address)
    except NetlinkError as error:
        return f"refused ({errname(error.code)})"
    msg = answer[0]
    kinds = {1: "unicast", 2: "local", 6: "blackhole", 7: "unreachable", 8: "prohibit"}
    kind = kinds.get(msg["type"], f"type {msg['type']}")
    gateway = msg.get_attr("RTA_GATEWAY")
    return f"{kind} via {gateway}" if gateway else kind


def forwardable(verdict: str) -> bool:
    return verdict.startswith("unicast")


def default_gateway(ipr: Any) -> str | None:
    for route in ipr.get_routes():
        if route["dst_len"] == 0 and route["type"] == 1 and route.get_attr("RTA_GATEWAY"):
            return str(route.get_attr("RTA_GATEWAY"))
    return None


def walk(root: str) -> Iterator[str]:
    for directory, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            yield os.path.join(directory, name)


def fresh_procfs() -> bool:
    """/proc is the sandbox's own procfs (bwrap --proc), not the outer one read-only."""
    outer = FACTS.get("pid_ns")
    return len(status().get("NSpid", "").split()) == 1 and bool(outer) and ns_id("pid") != outer


def outer_pids() -> list[int]:
    """Processes outside the sandbox's pid namespace (one NSpid entry in the outer procfs)."""
    if fresh_procfs():
        return []
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            text = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("NSpid:") and len(line.split()) == 2:
                found.append(int(name))
    return found


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def map_written_code(directory: str) -> dict[str, str]:
    """Copy a shared library and /bin/true into `directory`, then map them executable the
    two ways execve's rules do not see: loading the library (what LD_PRELOAD does) and
    running the program through the dynamic loader. What happened to each: "ran" or
    the failure, and the copies removed."""
    import ctypes
    import glob
    import shutil
    import subprocess

    library = next(iter(sorted(glob.glob("/lib/*/libanl.so.1") + glob.glob("/lib*/libanl.so.1")
                                + glob.glob("/usr/lib/*/libanl.so.1"))), "")
    loader = next(iter(sorted(glob.glob("/lib*/ld-linux*.so*")
                              + glob.glob("/lib/*/ld-linux*.so*"))), "")
    outcome: dict[str, str] = {}
    made = []
    try:
        if library:
            copy = os.path.join(directory, f".csbx-lib-{os.getpid()}.so")
            shutil.copyfile(library, copy)
            made.append(copy)
            try:
                ctypes.CDLL(copy)
                outcome["a library loaded (LD_PRELOAD's way)"] = "ran"
            except OSError as error:
                outcome["a library loaded (LD_PRELOAD's way)"] = str(error).rsplit(": ", 1)[-1]
        if loader:
            program = os.path.join(directory, f".csbx-true-{os.getpid()}")
            shutil.copyfile("/bin/true", program)
            os.chmod(program, 0o755)
            made.append(program)
            ran = subprocess.run([loader, program], capture_output=True, text=True,
                                 timeout=30, check=False)
            outcome["ld.so ./program"] = "ran" if ran.returncode == 0 else (
                ran.stderr.strip().rsplit(": ", 1)[-1] or f"exit {ran.returncode}")
    finally:
        for path in made:
            with contextlib.suppress(OSError):
                os.unlink(path)
    return outcome
