"""Launch the installed sandbox for real, as root and as an unprivileged user."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest

TEST_USER = "sbxuser"
SHIM_DIR = "/usr/local/bin"
PROBE = os.path.join(os.path.dirname(__file__), "probe.py")


@dataclass(frozen=True)
class Launcher:
    user: str
    home: str
    uid: int
    workspace: str

    def run(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 120,
        input: str | None = None,
        config: str | None = None,
        hosts: str | None = None,
        trust: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`config`: text bound over /etc/claude-sandbox.conf for this launch only, in a
        private mount namespace made as root before the launch drops to the user;
        `hosts`: a file bound over /etc/hosts the same way (the test internet's names);
        `trust`: a file bound over the system's trust bundle the same way."""
        base = {
            "PATH": f"{SHIM_DIR}:/usr/bin:/bin",
            "HOME": self.home,
            "USER": self.user,
            "LANG": "C.UTF-8",
            "CLAUDE_SANDBOX_EGRESS_JAIL": "0",
        }
        base.update(env or {})
        command = list(argv)
        conf_dir = None
        if self.user != "root":
            # setpriv leaves the environment alone, and passes nothing on a command line.
            command = [
                "setpriv",
                f"--reuid={self.uid}",
                f"--regid={self.uid}",
                "--init-groups",
                *command,
            ]
        binds = []
        if config is not None:
            conf_dir = tempfile.mkdtemp(prefix="cs-conf-")
            conf = os.path.join(conf_dir, "claude-sandbox.conf")
            with open(conf, "w", encoding="utf-8") as handle:
                handle.write(config)
            os.chmod(conf_dir, 0o755)
            os.chmod(conf, 0o644)
            binds.append(f"mount --bind {conf} /etc/claude-sandbox.conf")
        if hosts is not None:
            binds.append(f"mount --bind {hosts} /etc/hosts")
        if trust is not None:
            binds.append(f"mount --bind {trust} /etc/ssl/certs/ca-certificates.crt")
        if binds:
            script = " && ".join([*binds, 'exec "$@"'])
            command = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                       *command]
        try:
            return self._run(command, base, cwd, timeout, input)
        finally:
            if conf_dir is not None:
                shutil.rmtree(conf_dir, ignore_errors=True)

    def _run(self, command: list[str], base: dict[str, str], cwd: str | None, timeout: float,
             input: str | None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command,
            cwd=cwd or self.workspace,
            capture_output=True,
            env=base,
            text=True,
            timeout=timeout,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )

    def shell(self, *argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return self.run([f"{SHIM_DIR}/claude-sandbox", "shell", "--", *argv], **kwargs)  # type: ignore[arg-type]


def _ensure_user() -> None:
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        pytest.fail(f"the test user {TEST_USER} is missing: .ci/run creates it (useradd -m)")


@pytest.fixture(params=["root", TEST_USER])
def launcher(request: pytest.FixtureRequest) -> Iterator[Launcher]:
    user = request.param
    if os.getuid() != 0:
        pytest.fail("integration tests run as root (they also launch as an unprivileged user)")
    if user != "root":
        _ensure_user()
    entry = pwd.getpwnam(user)
    workspace = tempfile.mkdtemp(prefix="cs-ws-", dir="/tmp")
    os.chown(workspace, entry.pw_uid, entry.pw_gid)
    try:
        yield Launcher(user, entry.pw_dir, entry.pw_uid, workspace)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


@pytest.fixture
def probe_copy(launcher: Launcher) -> str:
    """probe.py copied into the workspace, readable by the launching user."""
    target = os.path.join(launcher.workspace, "probe.py")
    shutil.copy(PROBE, target)
    os.chmod(target, 0o644)
    return target
