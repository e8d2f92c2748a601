"""The launch path cannot be redirected, its imports are what we ship, nesting is a kernel fact."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

from .conftest import Launcher

pytestmark = pytest.mark.integration

CORE_VENV = "/usr/libexec/claude-sandbox/venv"
CORE_PYTHON = f"{CORE_VENV}/bin/python"
REAL_CLAUDE = "/usr/libexec/claude-sandbox/real/claude"


@pytest.fixture
def trap_dir(launcher: Launcher) -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="cs-trap-", dir="/tmp")
    os.chmod(directory, 0o777)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _plant(trap: str, workspace: str, home: str, uid: int) -> dict[str, str]:
    """Every redirection route of ADR 0000 §2, each leaving a marker if it ever runs."""
    fired = os.path.join(trap, "fired")
    os.mkdir(fired)
    os.chmod(fired, 0o777)
    touch = f"import os; open(os.path.join({fired!r}, %r), 'w').close()"
    bin_dir = os.path.join(trap, "bin")
    py_dir = os.path.join(trap, "py")
    os.makedirs(bin_dir)
    os.makedirs(os.path.join(py_dir, "claude_sandbox"))
    for name in ("python", "python3", "bwrap", "script", "unshare", "pasta", "ip", "git", "socat"):
        path = os.path.join(bin_dir, name)
        with open(path, "w") as handle:
            handle.write(f"#!/bin/sh\ntouch {fired}/bin-{name}\nexit 99\n")
        os.chmod(path, 0o755)
        shutil.copy(path, os.path.join(workspace, name))
    for module in ("sitecustomize", "usercustomize"):
        with open(os.path.join(py_dir, f"{module}.py"), "w") as handle:
            handle.write(touch % module + "\n")
    with open(os.path.join(py_dir, "claude_sandbox", "__init__.py"), "w") as handle:
        handle.write(touch % "shadowed-package" + "\n")
    shutil.copytree(
        os.path.join(py_dir, "claude_sandbox"), os.path.join(workspace, "claude_sandbox")
    )
    with open(os.path.join(py_dir, "evil.pth"), "w") as handle:
        handle.write(f"import os; open(os.path.join({fired!r}, 'pth'), 'w').close()\n")
    user_site = os.path.join(home, ".local/lib/python3.11/site-packages")
    os.makedirs(user_site, exist_ok=True)
    shutil.copy(os.path.join(py_dir, "evil.pth"), os.path.join(user_site, "cs-test-evil.pth"))
    shutil.copy(
        os.path.join(py_dir, "usercustomize.py"), os.path.join(user_site, "usercustomize.py")
    )
    bash_env = os.path.join(trap, "bash_env.sh")
    with open(bash_env, "w") as handle:
        handle.write(f"touch {fired}/bash-env\n")
    for root, dirs, files in os.walk(trap):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o777)
    return {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": py_dir,
        "PYTHONSTARTUP": os.path.join(py_dir, "sitecustomize.py"),
        "PYTHONUSERBASE": os.path.join(home, ".local"),
        "BASH_ENV": bash_env,
        "ENV": bash_env,
        "BASH_FUNC_exec%%": f"() {{ touch {fired}/bash-func; }}",
        "_fired": fired,
        "_user_site": user_site,
    }


def test_planted_redirections_never_run(launcher: Launcher, trap_dir: str) -> None:
    planted = _plant(trap_dir, launcher.workspace, launcher.home, launcher.uid)
    fired, user_site = planted.pop("_fired"), planted.pop("_user_site")
    try:
        result = launcher.run(["claude", "--version"], env=planted)
        shell = launcher.run(["claude-sandbox", "shell", "--", "/bin/true"], env=planted)
        jailed = launcher.run(
            ["claude-sandbox", "shell", "--", "/bin/true"],
            env={**planted, "CLAUDE_SANDBOX_EGRESS_JAIL": "1"},
        )
    finally:
        for name in ("cs-test-evil.pth", "usercustomize.py"):
            os.unlink(os.path.join(user_site, name))
    assert result.returncode == 0, result.stderr
    assert "Claude Code" in result.stdout
    assert shell.returncode == 0, shell.stderr
    assert jailed.returncode == 0, jailed.stderr
    assert os.listdir(fired) == [], f"planted code ran: {os.listdir(fired)}"


def test_the_shim_is_three_lines_naming_the_interpreter() -> None:
    for name in ("claude", "codex", "pi", "claude-sandbox"):
        path = f"/usr/local/bin/{name}"
        with open(path) as handle:
            lines = handle.read().splitlines()
        assert len(lines) == 3
        assert lines[0] == "#!/bin/bash -p"  # -p: no BASH_ENV, no imported functions
        assert lines[2].startswith(f"exec {CORE_PYTHON} -I -S -c ")
        info = os.stat(path)
        assert info.st_uid == 0 and info.st_mode & 0o022 == 0


def test_core_venv_holds_one_distribution_and_no_pth() -> None:
    site = subprocess.run(
        [CORE_PYTHON, "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    entries = sorted(name for name in os.listdir(site) if name != "__pycache__")
    assert entries == ["claude_sandbox", "claude_sandbox-0.1.0.dist-info"], entries
    pth = [
        os.path.join(root, name)
        for root, _, files in os.walk(CORE_VENV)
        for name in files
        if name.endswith(".pth")
    ]
    assert pth == []
    for root, dirs, files in os.walk(CORE_VENV):
        for name in dirs + files:
            info = os.lstat(os.path.join(root, name))
            assert info.st_uid == 0, os.path.join(root, name)
            if not os.path.islink(os.path.join(root, name)):
                assert info.st_mode & 0o022 == 0, os.path.join(root, name)


def _site() -> str:
    """The core venv's site-packages, which the shim names (it runs the core with -S):
    the installed package, whatever this test's own interpreter."""
    import glob

    found = glob.glob(f"{CORE_VENV}/lib/python3.*/site-packages")
    assert len(found) == 1, found
    return found[0]


def _imported_modules(stderr: str) -> set[str]:
    names = set()
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+\d+ \|(\s*)(\S+)", line)
        if match:
            names.add(match.group(2))
    return names


@pytest.mark.parametrize("git", [False, True], ids=["plain", "git-workspace"])
def test_launch_path_imports_only_the_standard_library_and_the_core(launcher: Launcher,
                                                                    git: bool) -> None:
    """Every interpreter of a jailed launch under -X importtime: the launcher, with the
    jail's holder and the egress proxy it forks (their imports are this one's), and the
    inner stage where it is Python; also in a git workspace, whose session end applies and
    removes the .git overlay."""
    if git:
        git_as_root = ["git", "-c", "safe.directory=*"]  # the workspace is the user's
        for argv in (["init", "-q", "."], ["-c", "user.name=t", "-c",
                     "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "t"]):
            subprocess.run([*git_as_root, *argv], cwd=launcher.workspace, check=True,
                           capture_output=True)
        subprocess.run(["chown", "-R", f"{launcher.uid}:{launcher.uid}", launcher.workspace],
                       check=True)
    result = launcher.run(
        [
            # As the shim starts it (-S, -c: no site, no runpy), under -X importtime.
            CORE_PYTHON, "-I", "-S", "-X", "importtime", "-c",
            f"import sys; sys.path.append({_site()!r}); from claude_sandbox.__main__ import "
            "main; sys.exit(main(sys.argv[1:]))",
            "_launch", "claude", "--",
            # Not `--version` alone: that is answered without a launch (check 94).
            "--version", "--verbose",
        ],
        env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1", "PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    modules = _imported_modules(result.stderr)
    assert "claude_sandbox.launch.run" in modules
    stdlib = set(sys.stdlib_module_names)
    # The distribution's own root-owned sitecustomize (Debian: an optional apport hook,
    # absent here) and copy.py's probe for Jython's org.python.core are the interpreter's.
    distribution = {"sitecustomize", "apport_python_hook", "org", "org.python", "org.python.core"}
    foreign = {
        m
        for m in modules
        if m.split(".")[0] not in stdlib
        and m.split(".")[0] != "claude_sandbox"
        and m not in distribution
    }
    assert foreign == set(), foreign
    site = subprocess.run(
        [CORE_PYTHON, "-I", "-c", "import sitecustomize; print(sitecustomize.__file__)"],
        capture_output=True,
        text=True,
    )
    if site.returncode == 0:
        path = os.path.realpath(site.stdout.strip())
        assert path.startswith(("/usr/lib/python3", "/etc/python3")) and os.stat(path).st_uid == 0
    assert not any(m.startswith("claude_sandbox.tools") for m in modules)
    # OpenSSL's libcrypto, 4-11 ms, for nothing a launch needs: names are hashed with the
    # interpreter's own SHA-256 (paths.sha256_hex).
    assert "_hashlib" not in modules
    # json.decoder imports re, and re enum: 4-5 ms an interpreter, for reading the egress
    # record, which core/jsontext.py reads without them.
    assert not {"json.decoder", "re", "enum"} & modules, {"json.decoder", "re", "enum"} & modules
    # shutil (fnmatch, re, the compressors: 8 ms) removed the session's git overlay.
    assert "shutil" not in modules
    # contextlib and ipaddress bring functools and collections, about 4 ms, for
    # suppress() and the route plan's networks (jail/reaping.py, jail/cidr.py).
    heavy = {"functools", "collections", "contextlib", "ipaddress"}
    assert not heavy & modules, heavy & modules
    # The ctypes package's forty types and its imports: 1.3-2 ms of the launcher's start,
    # where libc's few functions come through _ctypes (core/libc.py).
    assert "ctypes" not in modules


def test_egress_proxy_imports_little() -> None:
    """The holder and the egress proxy it forks start at every jailed launch. Imported as
    installed, by the same interpreter, apart from the launcher's own imports: no re
    (base64 imports it), enum, functools or collections."""
    result = subprocess.run(
        [CORE_PYTHON, "-I", "-S", "-X", "importtime", "-c",
         f"import sys; sys.path.append({_site()!r}); import claude_sandbox.jail.holder, "
         "claude_sandbox.jail.egressproxy"],
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    modules = _imported_modules(result.stderr)
    assert "claude_sandbox.jail.egressproxy" in modules
    heavy = {"re", "enum", "functools", "collections", "base64", "json.decoder", "ssl",
             "ctypes"}
    assert not heavy & modules, heavy & modules


def test_forged_is_sandbox_outside_still_wraps(launcher: Launcher) -> None:
    """IS_SANDBOX=1 in an outer environment must not run the real binary unwrapped."""
    result = launcher.run(
        [
            "claude-sandbox",
            "shell",
            "--",
            "/bin/sh",
            "-c",
            "grep -c claude-sandbox/inside /proc/self/mountinfo",
        ],
        env={"IS_SANDBOX": "1", "IS_SANDBOX_AGENT": "claude"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"  # the marker mount: it ran inside bwrap
    # `--version --verbose`: `--version` alone is answered without a launch (check 94).
    agent = launcher.run(["claude", "--version", "--verbose"], env={"IS_SANDBOX": "1"})
    assert (
        agent.returncode == 0 and "the egress jail is off" in agent.stderr
    )  # went through the launch


def test_nested_launch_inside_runs_the_program_directly(launcher: Launcher) -> None:
    result = launcher.shell(
        "/bin/sh", "-c", "claude --version && claude-sandbox shell -- sh -c 'echo nested'"
    )
    assert result.returncode == 0, result.stderr
    assert "Claude Code" in result.stdout and "nested" in result.stdout
    # One launch, one jail-off notice: the inner calls did not build a second sandbox.
    assert result.stderr.count("the egress jail is off") == 1


@pytest.mark.parametrize(
    ("agent", "expected"), [("claude", "Claude Code"), ("codex", "codex-cli"), ("pi", ".")]
)
def test_real_agents_answer_version_inside(launcher: Launcher, agent: str, expected: str) -> None:
    """The npm-installed CLIs run through their shims, inside the sandbox, jailed."""
    result = launcher.run(
        [agent, "--version"], env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1"}, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert expected in result.stdout + result.stderr
    inside = launcher.run(
        [
            "claude-sandbox",
            "shell",
            "--agent",
            agent,
            "--",
            "/bin/sh",
            "-c",
            f'test -n "$IS_SANDBOX" && {agent} --version',
        ],
        timeout=120,
    )
    assert inside.returncode == 0, inside.stderr[-2000:]


@pytest.mark.parametrize(
    "command", [[], ["shell"], ["explain"], ["version"], ["state"], ["review"], ["doctor"],
                ["verify"]]
)
def test_every_subcommand_has_help(command: list[str]) -> None:
    result = subprocess.run(
        ["/usr/local/bin/claude-sandbox", *command, "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "usage: claude-sandbox" in result.stdout
    if command == []:
        for word in ("shell", "explain", "version", "review", "doctor", "verify", "77", "78"):
            assert word in result.stdout


def test_bad_arguments_give_one_line_and_status_64() -> None:
    result = subprocess.run(
        ["/usr/local/bin/claude-sandbox", "frobnicate"], capture_output=True, text=True
    )
    assert result.returncode == 64
    assert result.stderr.startswith("claude-sandbox: ") and "Traceback" not in result.stderr
    result = subprocess.run(
        ["/usr/local/bin/claude-sandbox", "shell", "--agent", "gemini", "--", "true"],
        capture_output=True,
        text=True,
        cwd="/tmp",
    )
    assert result.returncode == 64 and "unknown agent 'gemini'" in result.stderr
