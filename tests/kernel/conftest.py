"""Real-kernel harness: run a probe inside bwrap with our seccomp filter and `_enter`
(in Python, or the compiled stage of the standard level, inside/enter.c).

The sandbox is the shape the launcher builds, minus the profile: the outer
/proc read-only (FACTS), private /dev, tmpfs /tmp, every namespace but the
network unshared, all capabilities dropped, the filter on an inherited fd
(dash cannot redirect fd 10, so pass_fds), then `_enter` inside.

Each test runs as root and as the unprivileged `sbxuser` where that differs.
Everything a test starts or makes is its own and is removed by the test.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from claude_sandbox.core.record import replace  # noqa: E402
from claude_sandbox.inside.spec import Inner, encode  # noqa: E402
from claude_sandbox.install.placed import COMMON_FLAGS as ENTER_FLAGS  # noqa: E402
from claude_sandbox.launch.planner import seccomp  # noqa: E402

PYTHON = "/usr/bin/python3"  # readable by sbxuser, unlike a venv under /root
USER = "sbxuser"
PROBE = Path(__file__).with_name("probe.py")


def _require(path: str, why: str) -> None:
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing: {why}")


@dataclass(frozen=True, slots=True)
class Result:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, object]:
        lines = [x for x in self.stdout.splitlines() if x.startswith("{")]
        assert lines, f"probe printed no result: rc={self.returncode} {self.stderr}"
        parsed: dict[str, object] = json.loads(lines[-1])
        return parsed


@dataclass(frozen=True, slots=True)
class Sandbox:
    user: str  # "root" or USER
    base: Path  # read-only copy of the package and the probe
    work: Path  # the writable workspace, bound read-write at the same path

    def run(
        self,
        argv: Sequence[str],
        level: str = "standard",
        *,
        settings: Inner | None = None,
        enter: bool = True,
        with_filter: bool = True,
        share_pid: bool = False,
        fresh_proc: bool = False,
        timeout: float = 60,
        preexec: Callable[[], None] | None = None,
        env: dict[str, str] | None = None,
        stage: str = "python",
    ) -> Result:
        settings = settings or Inner(level, writable=(str(self.work),))
        fd = seccomp.filter_fd(settings.level)
        record = os.memfd_create("inner", 0)
        os.write(record, encode(replace(settings, command=tuple(argv)), None))
        os.lseek(record, 0, os.SEEK_SET)
        unshare = ["--unshare-all", "--share-net"]
        if share_pid:  # to prove Landlock, not the pid namespace, stops a signal
            unshare = ["--unshare-user-try", "--unshare-ipc", "--unshare-uts"]
        proc = ["--proc", "/proc"] if fresh_proc else ["--ro-bind", "/proc", "/proc"]
        cmd = [
            "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", *proc,
            "--tmpfs", "/tmp", "--bind", str(self.work), str(self.work), "--chdir",
            str(self.work), *unshare, "--cap-drop", "ALL", "--die-with-parent",
        ]  # fmt: skip
        if with_filter:
            cmd += ["--seccomp", str(fd)]
        if enter and stage == "c":
            cmd += [str(self.base / "enter"), str(record)]
        elif enter:
            boot = (
                f"import sys; sys.path.insert(0, {str(self.base)!r}); "
                "from claude_sandbox.__main__ import main; sys.exit(main())"
            )
            cmd += [PYTHON, "-I", "-c", boot, "_enter", str(record)]
        else:
            cmd += list(argv)
        if self.user != "root":
            cmd = ["setpriv", f"--reuid={self.user}", f"--regid={self.user}", "--init-groups",
                   "--", *cmd]  # fmt: skip
        environ = {"PATH": "/usr/bin:/bin", "HOME": str(self.work), "LANG": "C.UTF-8"}
        environ.update(env or {})
        try:
            done = subprocess.run(
                cmd, pass_fds=[fd, record], capture_output=True, text=True, timeout=timeout,
                env=environ, preexec_fn=preexec, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        finally:
            os.close(fd)
            os.close(record)
        return Result(done.returncode, done.stdout, done.stderr)

    def probe(self, *args: str, **kw: object) -> Result:
        return self.run([PYTHON, "-I", str(self.base / "probe.py"), *args], **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def package_copy() -> Iterator[Path]:
    """The package and probe, world-readable outside /tmp (a tmpfs inside)."""
    for tool in ("bwrap", "setpriv"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is required for the kernel tests")
    _require(PYTHON, "the probe runs under the system Python")
    if os.geteuid() != 0:
        pytest.fail("the kernel tests run as root (they switch to sbxuser themselves)")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-m", USER], check=True)
    base = Path(tempfile.mkdtemp(prefix="cs-kernel-", dir="/var/tmp"))
    try:
        shutil.copytree(REPO / "claude_sandbox", base / "claude_sandbox",
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
        shutil.copy(PROBE, base / "probe.py")
        # The compiled inner stage from this checkout's source, as the installer builds it.
        subprocess.run(["gcc", *ENTER_FLAGS, "-o", str(base / "enter"),
                        str(REPO / "claude_sandbox" / "inside" / "enter.c")], check=True)
        for path in (base, *base.rglob("*")):
            path.chmod(0o755)
        yield base
    finally:
        shutil.rmtree(base)


@pytest.fixture(params=["root", USER])
def sandbox(request: pytest.FixtureRequest, package_copy: Path) -> Iterator[Sandbox]:
    user: str = request.param
    work = Path(tempfile.mkdtemp(prefix="cs-work-", dir="/var/tmp"))
    try:
        if user != "root":
            shutil.chown(work, user, user)
        yield Sandbox(user, package_copy, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
