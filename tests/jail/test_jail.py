"""The egress jail in real namespaces: containment, egress, read-back, relays, teardown."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Sequence

import pytest

from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_JAIL, EXIT_UNAVAILABLE, SandboxError
from claude_sandbox.jail import (
    channel,
    dirs,
    egresspolicy,
    iptables,
    lock,
    netfilter,
    netlink,
    routes,
)
from claude_sandbox.jail import holder as jail_holder
from claude_sandbox.jail import session as jail
from claude_sandbox.jail.routemsg import add_request
from claude_sandbox.jail.spec import JailSpec
from claude_sandbox.launch.planner.plan import resolv_conf
from tests.netfixtures import Internet, listening_in

from .conftest import (
    PROBE,
    SYSTEM_PY,
    LoopbackServer,
    PrivateNet,
    jail_available,
    processes_naming,
)

pytestmark = [
    pytest.mark.jail,
    pytest.mark.skipif(jail_available() is not None, reason=str(jail_available())),
]


def _settings(
    allow_ip: Sequence[str] = (), local: Sequence[int] = (), callback: Sequence[int] = ()
) -> JailSpec:
    return JailSpec(tuple(allow_ip), tuple(local), tuple(callback))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _group_members(groups: set[int]) -> list[str]:
    """Every process, zombies included, in one of `groups`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in groups:
            found.append(f"{pid} ({fields[0]})")
    return found


def assert_torn_down(j: jail.Jail, private_dir: str | None) -> None:
    for name, pid in j.started.items():
        assert not _alive(pid), f"{name} ({pid}) outlived the launch"
    # A relay and its connection children form a group; not even a zombie of
    # it may remain (the launcher is their subreaper, so nothing else reaps).
    relays = {pid for name, pid in j.started.items() if "relay" in name}
    assert not _group_members(relays), f"relay processes left: {_group_members(relays)}"
    assert private_dir is None or not os.path.exists(private_dir)


def launch(
    settings: JailSpec, argv: Sequence[str], tmp_path: os.PathLike[str]
) -> tuple[int, str, jail.Jail]:
    """Run argv jailed, its stdout captured in a file; check nothing is left."""
    out = os.path.join(tmp_path, f"out-{time.monotonic_ns()}")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o600)
    saved = os.dup(1)
    try:
        os.dup2(fd, 1)  # the holder, and so the session, inherits this stdout
        j = jail.start(settings)
        private_dir = j.private_dir
        status = j.run(list(argv), {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(fd)
    assert_torn_down(j, private_dir)
    with open(out) as f:
        return status, f.read(), j


def probe(
    settings: JailSpec, targets: Sequence[str], tmp_path: os.PathLike[str]
) -> dict[str, str]:
    status, out, _ = launch(settings, [SYSTEM_PY, "-c", PROBE, *targets], tmp_path)
    assert status == 0, out
    return {line.split()[0]: line.split()[1] for line in out.splitlines()}


def _gateway() -> str:
    out = subprocess.run(["ip", "-4", "route", "show", "default"], capture_output=True, text=True)
    return out.stdout.split()[2]


def test_private_hosts_and_container_loopback_are_unreachable(
    private_net: PrivateNet, loopback_server: LoopbackServer, tmp_path: os.PathLike[str]
) -> None:
    p10, p192 = private_net.private10, private_net.private192
    targets = [
        f"{p10.address}:{p10.port}",
        f"{p192.address}:{p192.port}",
        f"127.0.0.1:{loopback_server.port}",
        # pasta maps the gateway to the host's loopback unless --no-map-gw.
        f"{_gateway()}:{loopback_server.port}",
    ]
    # Outside the jail the private hosts answer: the test network works.
    outside = subprocess.run(
        [sys.executable, "-c", PROBE, *targets[:3]], capture_output=True, text=True, check=True
    ).stdout
    assert outside.count("connected") == 3, outside
    results = probe(_settings(), targets, tmp_path)
    assert results == dict.fromkeys(targets, "refused"), results


def test_allow_ip_opens_exactly_that_host(
    private_net: PrivateNet, tmp_path: os.PathLike[str]
) -> None:
    p10, p192 = private_net.private10, private_net.private192
    targets = [f"{p10.address}:{p10.port}", f"{p192.address}:{p192.port}"]
    results = probe(_settings(allow_ip=[p10.address]), targets, tmp_path)
    assert results == {targets[0]: "connected", targets[1]: "refused"}


def _wheel(directory: str, name: str, version: str) -> str:
    """A minimal, valid pure-Python wheel: the dist-info pip reads, nothing to install."""
    info = f"{name}-{version}.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    path = os.path.join(directory, f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
    return path


def _serve_index(listener: socket.socket, context: ssl.SSLContext, pages: dict[str, bytes],
                 hosts_seen: list[str]) -> None:
    """Answer each TLS request on `listener` from `pages` (path to body), one per connection."""
    while True:
        try:
            raw, _ = listener.accept()
        except OSError:
            return
        try:
            with context.wrap_socket(raw, server_side=True) as conn:
                conn.settimeout(10)
                head = b""
                while b"\r\n\r\n" not in head and (chunk := conn.recv(4096)):
                    head += chunk
                lines = head.decode(errors="replace").split("\r\n")
                path = lines[0].split(" ")[1] if " " in lines[0] else "-"
                hosts_seen.extend(line.split(":", 1)[1].strip() for line in lines[1:]
                                  if line.lower().startswith("host:"))
                body = pages.get(path)
                status = b"200 OK" if body is not None else b"404 Not Found"
                body = body or b""
                kind = b"text/html" if path.startswith("/simple/") else b"application/zip"
                conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind
                             + b"\r\nContent-Length: " + str(len(body)).encode()
                             + b"\r\nConnection: close\r\n\r\n" + body)
        except (OSError, ssl.SSLError):
            continue


def test_pip_reaches_the_registry_by_name_through_the_proxy(
        test_internet: Internet, tmp_path: os.PathLike[str]) -> None:
    """The package index through its ordinary client under the default allow-list: pypi.org
    and files.pythonhosted.org, by name through our resolver and the proxy, answered by an
    index on the test internet that holds those names."""
    base = str(tmp_path)
    cert, key = os.path.join(base, "index.pem"), os.path.join(base, "index.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=pypi.org", "-addext",
                    "subjectAltName=DNS:pypi.org,DNS:files.pythonhosted.org",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    hosts = os.path.join(base, "hosts")
    with open(test_internet.hosts) as f, open(hosts, "w") as out:
        out.write(f.read() + "198.51.100.40 pypi.org files.pythonhosted.org\n")
    wheel = _wheel(base, "demo", "1.0")
    with open(wheel, "rb") as f:
        data = f.read()
    name = os.path.basename(wheel)
    link = (f"https://files.pythonhosted.org/packages/{name}"
            f"#sha256={hashlib.sha256(data).hexdigest()}")
    routes_served = {"/simple/demo/": f'<html><body><a href="{link}">{name}</a></body></html>'
                     .encode(), f"/packages/{name}": data}
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    hosts_seen: list[str] = []
    listener = listening_in(test_internet.namespace, "198.51.100.40", 443)
    server = threading.Thread(target=_serve_index,
                              args=(listener, context, routes_served, hosts_seen), daemon=True)
    server.start()
    out = os.path.join(base, "egress")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o600)
    saved = os.dup(1)
    os.dup2(fd, 1)
    # The resolv.conf the launch binds over /etc/resolv.conf inside bwrap: every name the
    # client asks goes to our resolver, none to /etc/hosts inside.
    resolv = os.path.join(base, "resolv.conf")
    with open("/etc/resolv.conf") as host, open(resolv, "w") as f:
        f.write(resolv_conf(host.read()))
    with open(resolv) as f:
        assert f.readline().strip() == "nameserver 169.254.1.53"
    wheels = os.path.join(base, "wheels")
    try:
        j = jail.start(JailSpec((), (), (), rules=egresspolicy.defaults("claude"),
                                agent="claude", hosts_file=hosts))
        argv = [
            "/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--ro-bind", resolv, "/etc/resolv.conf", "--bind", base, base,
            "--setenv", "HOME", base, "--setenv", "TMPDIR", base,
            SYSTEM_PY, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
            "--disable-pip-version-check", "--index-url", "https://pypi.org/simple",
            "--cert", cert, "-d", wheels, "demo==1.0",
        ]  # fmt: skip
        status = j.run(argv, {"PATH": "/usr/bin:/bin"})
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(fd)
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() the server thread is in
        listener.close()
    with open(out) as f:
        text = f.read()
    assert status == 0, text
    assert os.listdir(wheels) == [name]
    assert {"pypi.org", "files.pythonhosted.org"} <= set(hosts_seen), hosts_seen


def _tampers() -> dict[str, tuple[int, int, bytes]]:
    """Changes made through the lock's own routing socket between programming and reading
    back, each as (message type, flags, body)."""
    add = netlink.NLM_F_CREATE | netlink.NLM_F_EXCL
    # struct fib_rule_hdr (AF_INET, table 100, FR_ACT_TO_TBL) and FRA_PRIORITY 100.
    rule = bytes([socket.AF_INET, 0, 0, 0, 100, 0, 0, 1]) + bytes(4) \
        + netlink.attribute(6, netlink.u32(100))
    blackhole = routes.Route("main", "blackhole", "198.51.100.0/24")
    elsewhere = routes.Route("100", "blackhole", "0.0.0.0/0")
    planned = routes.Route("main", "blackhole", "10.0.0.0/8")
    return {
        "an unplanned route in main": (netlink.RTM_NEWROUTE, add, add_request(blackhole, {})),
        "a route in another table": (netlink.RTM_NEWROUTE, add, add_request(elsewhere, {})),
        "a policy rule": (netlink.RTM_NEWRULE, add, rule),
        "a planned block removed": (netlink.RTM_DELROUTE, 0, add_request(planned, {})),
    }


def test_readback_matches_and_a_tampered_table_refuses(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker = os.path.join(tmp_path, "ran")
    argv = ["/usr/bin/touch", marker]
    status, _, j = launch(_settings(), argv, tmp_path)
    assert status == 0 and os.path.exists(marker)
    assert any("route add default via" in line for line in routes.plan_lines(j._plan))
    os.unlink(marker)
    real_program = lock.program
    for tamper, (kind, flags, body) in _tampers().items():
        # The change lands after the plan is programmed and before its read-back: only
        # the read-back can see it.
        def tampered(link: netlink.Netlink, *args: object, kind: int = kind,
                     flags: int = flags, body: bytes = body, what: str = tamper) -> set[int]:
            failed = real_program(link, *args)  # type: ignore[arg-type]
            assert link.change(kind, flags, body) == 0, what
            return failed

        monkeypatch.setattr(lock, "program", tampered)
        j = jail.start(_settings())
        private_dir = j.private_dir
        with pytest.raises(SandboxError) as info:
            j.run(argv, {})
        assert info.value.status == EXIT_JAIL, tamper
        assert "read back differ" in info.value.message, (tamper, info.value.message)
        assert not os.path.exists(marker), f"the command ran despite {tamper}"
        assert_torn_down(j, private_dir)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CALLBACK = """
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
open(sys.argv[2], "w").close()
c, _ = s.accept(); c.sendall(b"inside"); c.close()
"""


def test_local_and_callback_relays_work_both_ways(
    loopback_server: LoopbackServer, tmp_path: os.PathLike[str]
) -> None:
    # local-port: the jail reaches the container's 127.0.0.1:PORT, only that one.
    other = LoopbackServer()
    try:
        settings = _settings(local=[loopback_server.port])
        targets = [f"127.0.0.1:{loopback_server.port}", f"127.0.0.1:{other.port}"]
        assert probe(settings, targets, tmp_path) == {
            targets[0]: "connected",
            targets[1]: "refused",
        }
    finally:
        other.close()

    # callback-port: a browser outside reaches a listener inside.
    port = _free_port()
    ready = os.path.join(tmp_path, "ready")
    got: list[bytes] = []

    def browser() -> None:
        deadline = time.monotonic() + 20
        while not os.path.exists(ready) and time.monotonic() < deadline:
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            got.append(c.recv(6))

    t = threading.Thread(target=browser)
    t.start()
    status, _, _ = launch(
        _settings(callback=[port]), [SYSTEM_PY, "-c", CALLBACK, str(port), ready], tmp_path
    )
    t.join(30)
    assert status == 0 and got == [b"inside"]


def test_taken_callback_port_warns_and_is_skipped(tmp_path: os.PathLike[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        status, _, j = launch(_settings(callback=[port]), ["/bin/true"], tmp_path)
    assert status == 0
    assert any(f"callback-port {port}" in w and "in use" in w for w in j.warnings)


CLOSE_AT_ONCE = """
import sys
from claude_sandbox.jail import session as jail
from claude_sandbox.jail.spec import JailSpec
for port in sys.argv[1:]:
    j = jail.start(JailSpec((), (), (int(port),)))
    print(j.private_dir, flush=True)
    j.close()
"""


def test_a_launch_closed_at_once_leaves_no_relay() -> None:
    """An interrupt can close a launch the instant its outside relay was forked,
    before that relay called setsid: its group does not exist yet, and killing the
    group alone left the relay running and the launcher waiting for it forever."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(20)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        ports = [str(s.getsockname()[1]) for s in sockets]
    proc = subprocess.run(
        [sys.executable, "-c", CLOSE_AT_ONCE, *ports],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    for private_dir in proc.stdout.split():
        assert not os.path.exists(private_dir)
        assert not processes_naming(private_dir), f"a relay naming {private_dir} is left"


def test_session_status_follows_shell_convention(tmp_path: os.PathLike[str]) -> None:
    assert launch(_settings(), ["/bin/sh", "-c", "exit 7"], tmp_path)[0] == 7
    assert launch(_settings(), ["/bin/sh", "-c", "kill -KILL $$"], tmp_path)[0] == 137


def test_descriptors_reach_the_session(tmp_path: os.PathLike[str]) -> None:
    r, w = os.pipe()
    os.write(w, b"gitconfig")
    os.close(w)
    os.set_inheritable(r, True)
    j = jail.start(_settings())
    out = os.path.join(tmp_path, "fdout")
    status = j.run(
        ["/bin/sh", "-c", f"cat /dev/fd/{r} > {out}"], {"PATH": "/usr/bin:/bin"}, fds=(r,)
    )
    os.close(r)
    assert status == 0
    with open(out) as f:
        assert f.read() == "gitconfig"


# --- preflight refusals, each in a throw-away mount or user namespace -----------

PREFLIGHT = """
import sys
from claude_sandbox.jail import session as jail
from claude_sandbox.jail import preflight
from claude_sandbox.jail import start as jail_start
from claude_sandbox.jail.spec import JailSpec
from claude_sandbox.core.errors import SandboxError
try:
    preflight.preflight(needs_socat=False)
    j = jail.start(JailSpec((), (), ()))
    j.run(["/usr/bin/touch", sys.argv[1]], {})
except SandboxError as e:
    print(e.status, e.message)
"""


@pytest.mark.parametrize(
    ("setup", "expect"),
    [
        ("mount -t tmpfs none /dev/net", "/dev/net/tun is missing"),
        ("mount --bind /dev/null /dev/net/tun", "/dev/net/tun is not the tun device"),
        ("mount --bind /dev/null /usr/bin/pasta", "pasta not found"),
    ],
)
def test_preflight_refuses_in_one_line(setup: str, expect: str, tmp_path: os.PathLike[str]) -> None:
    marker = os.path.join(tmp_path, "ran")
    # A private mount namespace: the mask disappears with the process.
    script = f'{setup} && exec "$0" -c "$1" "$2"'
    out = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script,
         sys.executable, PREFLIGHT, marker],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.startswith(f"{EXIT_UNAVAILABLE} "), out
    assert expect in out and len(out.strip().splitlines()) == 1
    assert not os.path.exists(marker)


BEGIN_CHECKED = """
import glob, os, sys
from claude_sandbox.core.errors import SandboxError
from claude_sandbox.core.trace import Trace
from claude_sandbox.jail import preflight
from claude_sandbox.jail import start as jail_start
try:
    jail_start.begin(Trace(False, "jail"), (), lambda: preflight.preflight(needs_socat=False))
except SandboxError as e:
    print(e.status, e.message)
children = [pid for task in os.listdir("/proc/self/task")
            for pid in open(f"/proc/self/task/{task}/children").read().split()]
print("children:", children)
"""


@pytest.mark.parametrize(
    ("setup", "expect"),
    [
        ("mount -t tmpfs none /dev/net", "/dev/net/tun is missing"),
        ("mount --bind /dev/null /dev/net/tun", "/dev/net/tun is not the tun device"),
        ("mount --bind /dev/null /usr/bin/pasta", "pasta not found"),
    ],
)
def test_the_preflight_run_beside_the_holders_start_refuses_first(setup: str,
                                                                    expect: str) -> None:
    """The launch runs the host's preflight while the holder makes its namespaces
    (start.begin's check, steps.py): a missing primitive still refuses in the preflight's
    one line, not in the holder's words, and no holder or pasta is left running."""
    script = f'{setup} && exec "$0" -c "$1"'
    out = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script,
         sys.executable, BEGIN_CHECKED],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    lines = out.strip().splitlines()
    assert lines[0].startswith(f"{EXIT_UNAVAILABLE} ") and expect in lines[0], out
    assert lines[1:] == ["children: []"], out


def test_a_system_error_while_the_jail_starts_is_one_line(tmp_path: os.PathLike[str]) -> None:
    """/tmp read-only, in a private mount namespace: the private directory cannot be
    made. The launch stops with the jail's status and one line, not a traceback."""
    marker = os.path.join(tmp_path, "ran")
    script = ('mount --bind /tmp /tmp && mount -o remount,ro,bind /tmp && '
              'exec "$0" -c "$1" "$2"')
    result = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script,
         sys.executable, PREFLIGHT, marker],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert result.stdout.startswith(f"{EXIT_JAIL} egress jail: Read-only file system: /tmp/"), \
        (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and len(result.stdout.splitlines()) == 1
    assert not os.path.exists(marker)


def test_refused_user_namespaces_stop_the_launch(tmp_path: os.PathLike[str]) -> None:
    marker = os.path.join(tmp_path, "ran")
    for check_sysctl in (True, False):
        # In a fresh user namespace, user.max_user_namespaces = 0 refuses
        # nested ones there and nowhere else.
        script = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" -c "$1" "$2"'
        code = PREFLIGHT if check_sysctl else PREFLIGHT.replace(
            "preflight.preflight(needs_socat=False)", "pass")
        ran = subprocess.run(
            ["unshare", "-U", "-r", "sh", "-c", script, sys.executable, code, marker],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        out = ran.stdout
        assert out.startswith(f"{EXIT_UNAVAILABLE} ") and "user" in out, out
        if not check_sysctl:  # the holder's own unshare(2) refused, and said why
            assert "cannot create a user and network namespace (unshare: " in out, out
        assert "Traceback" not in ran.stderr, ran.stderr
        assert not os.path.exists(marker)


PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
SBX_PROBE = "id -u; ip -4 route | grep -cE '^(blackhole|unreachable) '"


def test_sbxuser_launch(tmp_path: os.PathLike[str]) -> None:
    """The jail as an unprivileged user: contained, and torn down."""
    venv = "/tmp/claude-sandbox-test-sbxuser-venv"
    if subprocess.run(["id", "sbxuser"], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "-m", "sbxuser"], check=True)
    if not os.path.exists(venv):
        subprocess.run([SYSTEM_PY, "-m", "venv", "--without-pip", venv], check=True)
    site = subprocess.run(
        [f"{venv}/bin/python", "-c", PURELIB],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    package = os.path.dirname(os.path.dirname(jail.__file__))  # claude_sandbox/
    link = os.path.join(site, "claude_sandbox")
    # The venv outlives a run; its link must lead to this checkout, not an earlier one.
    if not os.path.islink(link) or os.readlink(link) != package:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(link)
        os.symlink(package, link)
    code = (
        "from claude_sandbox.jail import session as jail\n"
        "from claude_sandbox.jail.spec import JailSpec\n"
        "j = jail.start(JailSpec((), (), ()))\n"
        "d = j.private_dir\n"
        f"rc = j.run(['/bin/sh', '-c', {SBX_PROBE!r}], {{'PATH': '/usr/bin:/bin:/usr/sbin'}})\n"
        "import os; print('rc', rc, 'dir-left', os.path.exists(d), sorted(j.started))\n"
    )  # fmt: skip
    out = subprocess.run(
        ["su", "sbxuser", "-s", "/bin/sh", "-c", f'cd /tmp && {venv}/bin/python -I -c "$0"', code],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = out.stdout.split()
    assert "rc 0 dir-left False" in out.stdout, out.stdout + out.stderr
    assert lines[0] == "0"  # root inside the holder's namespace (bwrap maps it back)
    assert int(lines[1]) >= 17  # the block list is there, a row per class


# --- signals at the two moments the soak test once caught ------------------------


KILLED_LAUNCHER = """
import json, sys
from claude_sandbox.jail import session as jail
from claude_sandbox.jail.spec import JailSpec
j = jail.start(JailSpec((), (int(sys.argv[1]),), (int(sys.argv[2]),)))
print(json.dumps({"dir": j.private_dir}), flush=True)
j.run(sys.argv[3:], {"PATH": "/usr/bin:/bin"})
"""


def test_a_sigkilled_launcher_leaves_nothing_running(tmp_path: os.PathLike[str]) -> None:
    """Nothing of ours runs once the launcher is gone: pasta and the outside relays
    die with it (parent-death signal), the session with bwrap (--die-with-parent),
    the inside relays with the session; the next launch removes its directory."""
    mark = os.path.join(tmp_path, "session-up")
    session = [
        "/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
        "--bind", str(tmp_path), str(tmp_path), "--die-with-parent", "--",
        "/bin/sh", "-c", f"touch {mark}; exec sleep 30",
    ]  # fmt: skip
    launcher = subprocess.Popen(
        [sys.executable, "-c", KILLED_LAUNCHER, str(_free_port()), str(_free_port()), *session],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    assert launcher.stdout is not None
    private_dir = json.loads(launcher.stdout.readline())["dir"]
    deadline = time.monotonic() + 10
    while not os.path.exists(mark):
        assert launcher.poll() is None and time.monotonic() < deadline, "the session never ran"
        time.sleep(0.01)
    assert processes_naming(private_dir), "no pasta or relay to watch"
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 5
    while processes_naming(private_dir) or processes_naming(mark):
        assert time.monotonic() < deadline, (
            f"left running: {processes_naming(private_dir) + processes_naming(mark)}"
        )
        time.sleep(0.05)
    assert os.path.isdir(private_dir)  # nothing could remove it at the time
    jail.start(_settings()).close()
    assert not os.path.exists(private_dir), "the next launch did not sweep the directory"


def test_holder_killed_while_an_inside_relay_starts_leaves_no_relay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The holder has spawned the inside socat but not yet reported its pid."""
    real_ask = jail.Jail._ask

    def ask(self: jail.Jail, fields: list[str]) -> list[str]:
        if fields[0] != "relay":
            return real_ask(self, fields)
        assert self._holder is not None and self._sock is not None
        holder = self._holder.pid
        # The holder waits for a listener on the name it is given, and socat
        # listens on the one in its argv: naming another keeps the holder in
        # that wait (never reporting), so the TERM lands in the window every run.
        channel.send(self._sock, [*fields[:2], fields[2] + ".unbound", *fields[3:]])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # until the relay has exec'd socat
            with open(f"/proc/{holder}/task/{holder}/children") as f:
                kids = f.read().split()
            if kids and processes_naming(fields[2]):
                break
            time.sleep(0.0005)
        os.kill(holder, signal.SIGTERM)  # what _forward does with a TERM
        # The holder gone, with our request read or unread, is HolderGone; an answer
        # would mean it outlived the TERM.
        reply = channel.answer(self._sock)
        if reply is None:
            raise jail.reaping.HolderGone
        raise AssertionError(f"the holder outlived SIGTERM: {reply}")

    monkeypatch.setattr(jail.Jail, "_ask", ask)
    j = jail.start(_settings(callback=[_free_port()]))
    private_dir = j.private_dir
    assert private_dir is not None
    assert j.run(["/bin/true"], {}) == 128 + signal.SIGTERM
    assert not processes_naming(private_dir), "an inside relay outlived the launch"
    assert_torn_down(j, private_dir)


def test_holder_ends_quietly_when_the_launcher_goes_mid_request(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A launcher SIGKILLed while the holder waits for a tool: no traceback on the terminal."""
    j = jail.start(_settings())
    try:
        assert j._sock is not None and j._holder is not None
        # The packet filter's tool, started by begin(): the holder waits for it to answer.
        channel.send(j._sock, ["finish"])
        j._sock.shutdown(socket.SHUT_RDWR)  # as the kernel does for a dead launcher
        assert j._holder.wait() == 1
    finally:
        j.close()
    assert "Traceback" not in capfd.readouterr().err


def _comm(pid: int) -> str:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/comm") as f:
        return f.read().strip()
    return ""


def test_the_namespace_sweep_ends_an_orphaned_proxy_it_cannot_see_into() -> None:
    """A holder that died in set-up leaves what it started to the teardown's sweep of its
    user namespace. The egress proxy is not dumpable and its memory map is a fork of the
    launcher's, so an unprivileged launcher cannot see its namespace: the sweep also ends
    a child of the launcher by the proxy's name, and no other child."""
    inside = subprocess.Popen(["unshare", "-U", "sleep", "30"])
    proxy = subprocess.Popen([sys.executable, "-c", "import ctypes, time; ctypes.CDLL(None)."
                              f"prctl(15, {jail_holder.PROXY_NAME.encode()!r}, 0, 0, 0); "
                              "time.sleep(30)"])
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        mine = os.stat("/proc/self/ns/user")
        while (_comm(proxy.pid) != jail_holder.PROXY_NAME
               or os.stat(f"/proc/{inside.pid}/ns/user").st_ino == mine.st_ino):
            assert time.monotonic() < deadline, "the stand-ins did not start"
            time.sleep(0.01)
        swept, children = jail.reaping.kill_namespace(os.stat(f"/proc/{inside.pid}/ns/user"),
                                                      jail_holder.PROXY_NAME)
        # Both are this process's children: the caller reaps them once they have ended.
        assert sorted(children) == sorted([inside.pid, proxy.pid])
        jail.reaping.wait_all(swept)
        assert inside.wait(timeout=5) == -signal.SIGKILL
        assert proxy.wait(timeout=5) == -signal.SIGKILL
        assert bystander.poll() is None, "a child of another name was ended"
    finally:
        for child in (inside, proxy, bystander):
            child.kill()
            child.wait()


def test_the_namespace_sweep_ends_what_forks_while_it_scans() -> None:
    """A shell in the holder's user namespace that starts one program after another (as
    the packet filter's does) can fork between the sweep's listing of /proc and its own
    kill: the sweep scans again until it finds nothing new, and nothing of the namespace
    is left running."""
    forking = subprocess.Popen(["unshare", "-U", "sh", "-c",
                                "while :; do sleep 30 & sleep 30 & done"])
    try:
        mine = os.stat("/proc/self/ns/user")
        deadline = time.monotonic() + 10
        while os.stat(f"/proc/{forking.pid}/ns/user").st_ino == mine.st_ino:
            assert time.monotonic() < deadline, "the namespace did not start"
            time.sleep(0.01)
        userns = os.stat(f"/proc/{forking.pid}/ns/user")
        time.sleep(0.2)  # some hundreds of children by now, and more every instant
        swept, children = jail.reaping.kill_namespace(userns, jail_holder.PROXY_NAME)
        jail.reaping.wait_all(swept)
        assert children == [forking.pid]
        # The killed ones are zombies now, still in the namespace, until their new
        # parent (not a subreaper here: init) reaps them; what runs is what counts.
        left = []
        for name in os.listdir("/proc"):
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{name}/ns/user")
                if name.isdigit() and (st.st_dev, st.st_ino) == (userns.st_dev, userns.st_ino) \
                        and _comm_and_state(int(name))[1] != "Z":
                    left.append(name)
        assert not left, f"still running in the namespace: {left}"
    finally:
        forking.kill()
        forking.wait()
        subprocess.run(["pkill", "-KILL", "-f", "^sleep 30$"], check=False)


def _comm_and_state(pid: int) -> tuple[str, str]:
    with open(f"/proc/{pid}/stat") as f:
        head, tail = f.read().rsplit(")", 1)
    return head.partition("(")[2], tail.split()[0]


def _zombie_children(comm: str) -> list[int]:
    found = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            for pid in f.read().split():
                with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as g:
                    head, tail = g.read().rsplit(")", 1)
                    if head.partition("(")[2] == comm and tail.split()[0] == "Z":
                        found.append(int(pid))
    return found


def test_bwraps_orphaned_init_is_reaped(tmp_path: os.PathLike[str]) -> None:
    """bwrap exits as soon as its sandbox reports the command's status, leaving its
    init (pid 1 inside) to exit on its own: the launcher, its subreaper, reaps it,
    and afterwards is no longer a subreaper if it was not one before."""
    import ctypes

    libc = ctypes.CDLL(None)
    before = ctypes.c_int(0)
    libc.prctl(37, ctypes.byref(before), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
    session = ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
               "--unshare-pid", "--die-with-parent", "--", "/bin/true"]
    status, _, _ = launch(_settings(), session, tmp_path)
    assert status == 0
    assert not _zombie_children("bwrap"), "bwrap's init was left a zombie"
    after = ctypes.c_int(0)
    libc.prctl(37, ctypes.byref(after), 0, 0, 0)
    assert after.value == before.value


def test_the_sweep_spares_live_launches_and_other_pid_namespaces() -> None:
    """A /tmp shared with another container holds its launches too: their pids
    mean nothing here, so only this pid namespace's dead launchers are swept."""
    live = dirs.make_private_dir()
    dead_here = f"/tmp/{dirs._own_prefix()}999999999.dead"
    foreign = f"/tmp/claude-sandbox-jail.{os.getuid()}.1.999999999.other"
    for path in (dead_here, foreign):
        os.mkdir(path, 0o700)
    try:
        dirs.sweep_stale_dirs()
        assert os.path.isdir(live) and os.path.isdir(foreign)
        assert not os.path.exists(dead_here)
    finally:
        for path in (live, dead_here, foreign):
            dirs.remove_dir(path)


@pytest.mark.parametrize("back_end", ["x_tables", "nf_tables"])
def test_a_packet_filter_that_reads_back_otherwise_refuses_before_the_session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str], back_end: str,
) -> None:
    """What the filter reads back is checked before anything more runs in the namespace:
    a table short of its last refusal (an agent's UDP would leave) ends the launch there,
    the session never run. The holder, a fork of this process, writes the short table;
    the launcher expects the planned one. x_tables: the holder writes it itself;
    nf_tables: where the kernel refuses x_tables, the tools it starts instead do."""
    real_write, real_request = iptables.write, netfilter.request

    def short_tables(tables: Sequence[tuple[str, bytes, bytes]]) -> list[str]:
        cut = iptables.table((1, 2, 3), iptables.filter_rules(netfilter.MARK)[:-1])
        return real_write([tables[0], ("filter", *cut)])

    def short_text() -> list[str]:  # the tools' rules, as the request carries them
        fields = real_request()
        cut = netfilter.FILTER[-1] + "\n"
        assert cut in fields[7]
        return [*fields[:7], fields[7].replace(cut, ""), *fields[8:]]

    if back_end == "x_tables":
        monkeypatch.setattr(iptables, "write", short_tables)
    else:
        monkeypatch.setattr(iptables, "write", lambda _: ["err", "no x_tables (the test's)"])
        monkeypatch.setattr(netfilter, "request", short_text)
    _refused_before_the_session("packet filter read back differs", tmp_path)


def _refused_before_the_session(said: str, tmp_path: os.PathLike[str]) -> None:
    """A jailed launch refused, saying `said`, its session never run, all torn down."""
    marker = os.path.join(tmp_path, "ran")
    j = jail.start(_settings())
    private_dir = j.private_dir
    with pytest.raises(SandboxError, match=said):
        j.run(["/bin/sh", "-c", f"touch {marker}"], {"PATH": "/usr/bin:/bin"})
    assert not os.path.exists(marker)
    assert_torn_down(j, private_dir)


def test_a_filter_written_and_not_read_back_refuses_rather_than_trying_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str],
) -> None:
    """Once x_tables hold the tables, their read-back is the answer: one that fails
    refuses the launch; the nf_tables tools are not a second chance."""
    monkeypatch.setattr(iptables, "SO_GET_ENTRIES", 0x7F)  # no such option: the read fails
    _refused_before_the_session("written and cannot be read back", tmp_path)


# In a namespace of the jail's kind: the tables written as the holder writes them, their
# read-back checked as the launcher checks it, then iptables' own legacy tool asked what
# the kernel holds, which must print exactly the planned rules (netfilter.NAT, FILTER).
_DIRECT = """
import json, subprocess, sys
from claude_sandbox.jail import iptables, netfilter
written = iptables.write(netfilter.tables())
saved = [subprocess.run([sys.argv[1], "-t", t], capture_output=True, text=True,
                        env={"XTABLES_LOCKFILE": sys.argv[2]}).stdout for t in ("nat", "filter")]
print(json.dumps({"written": written, "saved": "".join(saved)}))
"""


@pytest.mark.parametrize("user", ["root", "sbxuser"])
def test_the_packet_filter_is_written_through_x_tables_as_iptables_reads_it(user: str) -> None:
    """The encoding proved by another reader: what the holder writes through the kernel's
    x_tables socket options reads back through iptables-legacy-save as exactly the planned
    rules, as root and as a user (whose namespace's root may open neither the host's
    xtables lock nor /proc/net/ip_tables_names)."""
    save = paths.find_tool("iptables-legacy-save")
    if not save:
        pytest.skip("iptables' legacy tools are not installed")
    info = pwd.getpwnam(user)
    directory = tempfile.mkdtemp(prefix="csbx-filter-", dir="/tmp")
    try:
        os.chown(directory, info.pw_uid, info.pw_gid)
        become = [] if user == "root" else ["runuser", "-u", user, "--"]
        ran = subprocess.run([*become, "unshare", "--user", "--map-root-user", "--net",
                              sys.executable, "-c", _DIRECT, save, f"{directory}/xtables.lock"],
                             capture_output=True, text=True, timeout=30, check=False,
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        assert ran.returncode == 0, ran.stderr
        found = json.loads(ran.stdout)
        assert found["written"][0] == "ok", found
        assert netfilter.answer(["written", *found["written"][1:]]) == -1
        netfilter.check(["ok", "0", found["saved"], ""])
    finally:
        dirs.remove_dir(directory)


@pytest.mark.parametrize("user", ["root", "sbxuser"])
def test_the_packet_filter_reads_back_as_planned_from_the_nf_tables_tools(user: str) -> None:
    """Where the kernel refuses x_tables, the holder runs the nf_tables tools instead:
    exactly the planned tables are written and read back, in a namespace of the jail's
    kind, as root and as a user."""
    info = pwd.getpwnam(user)
    _, text, *argv = netfilter.tool_request()
    become = [] if user == "root" else ["runuser", "-u", user, "--"]
    ran = subprocess.run([*become, "unshare", "--user", "--map-root-user", "--net", *argv],
                         input=text, capture_output=True, text=True, timeout=30, check=False,
                         cwd=info.pw_dir if os.path.isdir(info.pw_dir) else "/")
    netfilter.check(["ok", str(ran.returncode), ran.stdout, ran.stderr])
    assert "(nf_tables)" in ran.stdout.splitlines()[0], ran.stdout


def _running(marker: str) -> list[int]:
    """The pids of processes whose command line holds `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
            if marker.encode() in f.read():
                found.append(int(pid))
    return found


def test_nothing_of_the_session_runs_once_the_teardown_has_begun(
    tmp_path: os.PathLike[str],
) -> None:
    """Jail.run(close=False) returns with pasta and the proxy still exiting, and the
    launcher then applies the workspace's exit (steps.py): by then every process of the
    session's pid namespace has ended, a background one the agent left included, which
    would otherwise write into the workspace behind that exit's back."""
    marker = f"{time.monotonic_ns() % 997}.5"
    argv = ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--unshare-pid", "--die-with-parent", "/bin/sh", "-c",
            f"sleep {marker} & sleep {marker} & exit 0"]
    j = jail.start(_settings())
    private_dir = j.private_dir
    try:
        assert j.run(argv, {"PATH": "/usr/bin:/bin"}, close=False) == 0
        assert _running(f"sleep\0{marker}") == [], "the agent's background process runs on"
    finally:
        j.close()
    assert_torn_down(j, private_dir)


# In a namespace of the jail's kind: a nat table written, then a filter table the kernel
# refuses (REJECT --reject-with tcp-reset on an entry that is not TCP's): the nat table
# is emptied again before the holder falls back to the nf_tables tools.
_REFUSED_FILTER = """
import json, struct, subprocess, sys
from claude_sandbox.jail import iptables, netfilter
nat = iptables.table((0, 1, 3, 4), iptables.nat_rules(netfilter.MARK, 15001, 15053))
bad = iptables._entry(iptables._ip(), [], iptables._reject(7))
refused = iptables.table((1, 2, 3), [bad])
written = iptables.write([("nat", *nat), ("filter", *refused)])
saved = subprocess.run([sys.argv[1], "-t", "nat"], capture_output=True, text=True,
                       env={"XTABLES_LOCKFILE": sys.argv[2]}).stdout
print(json.dumps({"written": written, "saved": saved}))
"""


def test_a_table_refused_after_another_was_written_leaves_that_one_empty() -> None:
    save = paths.find_tool("iptables-legacy-save")
    if not save:
        pytest.skip("iptables' legacy tools are not installed")
    directory = tempfile.mkdtemp(prefix="csbx-filter-", dir="/tmp")
    try:
        ran = subprocess.run(["unshare", "--user", "--map-root-user", "--net", sys.executable,
                              "-c", _REFUSED_FILTER, save, f"{directory}/xtables.lock"],
                             capture_output=True, text=True, timeout=30, check=False,
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        assert ran.returncode == 0, ran.stderr
        found = json.loads(ran.stdout)
        assert found["written"][0] == "err" and "filter table" in found["written"][1], found
        assert "*nat" in found["saved"] and "-A " not in found["saved"], found["saved"]
    finally:
        dirs.remove_dir(directory)


def _zombies() -> set[int]:
    found = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            for pid in f.read().split():
                with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as g:
                    if g.read().rsplit(")", 1)[1].split()[0] == "Z":
                        found.add(int(pid))
    return found


def test_a_launch_refused_with_the_filter_pending_leaves_no_zombie(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The packet filter's tool is the holder's child until `finish` reaps it; a launch
    refused before (here by the route lock) kills the holder, which leaves the tool to
    the launcher, its subreaper: the launcher reaps it."""
    def refuse(*_: object) -> None:
        time.sleep(0.3)  # the tool has ended by now, unreaped: a zombie to be
        raise SandboxError("refused for the test", EXIT_JAIL)

    monkeypatch.setattr(jail.lock, "lock_routes", refuse)
    before = _zombies()
    j = jail.start(_settings())
    private_dir = j.private_dir
    with pytest.raises(SandboxError, match="refused for the test"):
        j.run(["/bin/true"], {})
    assert _zombies() <= before, "a process of the launch is left unreaped"
    assert_torn_down(j, private_dir)
