"""`verify` passes on the installed sandbox, and each check can fail.

These launch real sandboxes: they take the shared namespace lock and run only
where claude-sandbox is installed. `verify` runs as shipped, egress jail on.
The weakened sandboxes built here have no jail, so they run with
CLAUDE_SANDBOX_EGRESS_JAIL=0 (the jail checks then PASS with "jail disabled by
the operator"), except where a jail check itself is shown to fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCK = "/tmp/claude-sandbox-ns.lock"
SHIM = "/usr/local/bin/claude-sandbox"
TOOLS_PYTHON = "/usr/libexec/claude-sandbox/tools-venv/bin/python"
JAIL_OFF = {"CLAUDE_SANDBOX_EGRESS_JAIL": "0"}

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not os.path.exists(SHIM) or not os.path.exists(TOOLS_PYTHON),
                       reason="claude-sandbox is not installed here"),
]


def _verify(agent: str, user: str | None = None, *extra: str) -> tuple[int, dict]:
    argv = [SHIM, "verify", "--json", "--agent", agent, *extra]
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    result = subprocess.run(["flock", LOCK, *argv], capture_output=True, text=True,
                            check=False, cwd="/tmp", timeout=600)
    return result.returncode, json.loads(result.stdout or "{}")


def _failures(report: dict) -> list[str]:
    return [f"{r['id']} {r['detail']}" for r in report.get("rows", [])
            if r["outcome"] in ("FAIL", "ESCAPED")]


# The probes of the jail's address classes, the stores, the thread of a hidden process,
# vsock, a linked control path, a squatted scratch directory and packet sockets: BLOCKED
# for every agent, as root and as a user; the root-only flood and a directory's time set
# back for every agent as root (a user's launch walks no root-only file).
PROBES_EVERYWHERE = ("A57", "A58", "A60", "A64", "A65", "A67", "A69")
PROBES_AS_ROOT = ("A66", "A72")
SCRATCH_NAMES = ("/var/tmp/claude-agent", "/var/tmp/claude-agent-{uid}")


def _blocked(report: dict, probes: tuple[str, ...] = PROBES_EVERYWHERE) -> list[str]:
    rows = {r["id"]: r for r in report.get("rows", [])}
    return [f"{p} {rows.get(p, {}).get('outcome')}" for p in probes
            if rows.get(p, {}).get("outcome") != "BLOCKED"]


@contextlib.contextmanager
def _scratch_names_squatted(uid: int, squat: bool) -> Iterator[None]:
    """Probe A67 with something to attack: the user's own scratch directories put aside
    (and back after, with what the run made there removed), so that another user may make
    them first; with `squat`, root makes them first here (the runner, as the user, cannot
    act as another user)."""
    names = [name.format(uid=uid) for name in SCRATCH_NAMES]
    aside, made, free = [], [], []
    for name in names:
        if os.path.lexists(name):
            if os.lstat(name).st_uid != uid:
                continue  # another user's already: left as it is
            os.rename(name, name + ".aside")
            aside.append(name)
        free.append(name)
        if squat:
            os.mkdir(name, 0o755)
            made.append(name)
    try:
        yield
    finally:
        for name in free:  # the squat, or what the run made there as the user's own
            if name in made or (os.path.lexists(name) and os.lstat(name).st_uid == uid):
                shutil.rmtree(name, ignore_errors=True)
        for name in aside:
            os.rename(name + ".aside", name)


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_verify_passes_as_root(agent: str) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root")
    with _scratch_names_squatted(0, squat=False):
        status, report = _verify(agent, None, "--adversarial")
    assert status == 0 and not _failures(report), _failures(report)
    assert not _blocked(report), _blocked(report)
    assert not _blocked(report, PROBES_AS_ROOT), _blocked(report, PROBES_AS_ROOT)


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_verify_passes_as_sbxuser(agent: str) -> None:
    if os.getuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root to switch to sbxuser")
    subprocess.run(["id", "sbxuser"], check=False, capture_output=True).returncode == 0 or \
        subprocess.run(["useradd", "-m", "sbxuser"], check=True)
    with _scratch_names_squatted(pwd.getpwnam("sbxuser").pw_uid, squat=True):
        status, report = _verify(agent, "sbxuser", "--adversarial")
    assert status == 0 and not _failures(report), _failures(report)
    assert not _blocked(report), _blocked(report)


@pytest.mark.parametrize("user", ["root", "sbxuser"])
@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_verify_passes_with_harsh_and_check_50_sees_it(tmp_path: Path, user: str,
                                                       agent: str) -> None:
    """The operator's `hardening = harsh`, bound over /etc/claude-sandbox.conf in a
    private mount namespace, as the launch tests do: the checks pass, the probes of
    what the sandbox wrote running (A61, and from memory A68) are blocked; as the user,
    whom no memory cgroup caps here, with max-memory set too (check 91, probe A63)."""
    if os.getuid() != 0:
        pytest.skip("needs root to bind a config over /etc")
    conf = tmp_path / "claude-sandbox.conf"
    conf.write_text("hardening = harsh\n" + ("max-memory = 2G\n" if user != "root" else ""))
    conf.chmod(0o644)
    tmp_path.chmod(0o755)
    as_user = f"runuser -u {user} -- " if user != "root" else ""
    script = (f"mount --bind {conf} /etc/claude-sandbox.conf && "
              f"exec {as_user}{SHIM} verify --json --adversarial --agent {agent}")
    result = subprocess.run(["flock", LOCK, "unshare", "-m", "--propagation", "private",
                             "sh", "-c", script], capture_output=True, text=True,
                            check=False, cwd="/tmp", timeout=900)
    report = json.loads(result.stdout or "{}")
    assert result.returncode == 0 and not _failures(report), (_failures(report), result.stderr)
    rows = {r["id"]: r for r in report["rows"]}
    assert rows["50"]["outcome"] == "PASS" and "EACCES" in rows["50"]["detail"], rows["50"]
    assert rows["90"]["outcome"] == "PASS" and "noexec" in rows["90"]["detail"], rows["90"]
    assert rows["A61"]["outcome"] == "BLOCKED", rows["A61"]
    assert rows["A68"]["outcome"] == "BLOCKED", rows["A68"]
    if user != "root":
        assert rows["91"]["outcome"] == "PASS" and "refused" in rows["91"]["detail"], rows["91"]
        assert rows["A63"]["outcome"] == "BLOCKED", rows["A63"]


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_verify_passes_with_brokered_and_its_side_doors_are_closed(tmp_path: Path,
                                                                   agent: str) -> None:
    """`hardening = brokered` as the unprivileged user: the catalogue passes as a command
    through the server, and checks 62-68 and probes A41-A45, A59 and A62 from the agent's
    own process. (A root launch refuses brokered: its command server cannot make a user
    namespace per command from uid 0 inside.)"""
    if os.getuid() != 0:
        pytest.skip("needs root to bind a config over /etc and act as sbxuser")
    conf = tmp_path / "claude-sandbox.conf"
    conf.write_text("hardening = brokered\n")
    conf.chmod(0o644)
    tmp_path.chmod(0o755)
    as_user = "setpriv --reuid=sbxuser --regid=sbxuser --init-groups"
    script = (f"mount --bind {conf} /etc/claude-sandbox.conf && "
              f"exec {as_user} {SHIM} verify --json --adversarial --agent {agent}")
    result = subprocess.run(["flock", LOCK, "unshare", "-m", "--propagation", "private",
                             "sh", "-c", script], capture_output=True, text=True,
                            check=False, cwd="/tmp", timeout=900,
                            env={"PATH": "/usr/local/bin:/usr/bin:/bin",
                                 "HOME": "/home/sbxuser"})
    report = json.loads(result.stdout or "{}")
    assert result.returncode == 0 and not _failures(report), (_failures(report), result.stderr)
    rows = {r["id"]: r for r in report["rows"]}
    for number in ("62", "63", "64", "65", "66", "67", "68"):
        assert rows[number]["outcome"] == "PASS", rows[number]
    for probe in ("A41", "A42", "A43", "A44", "A45", "A59", "A62"):
        assert rows[probe]["outcome"] == "BLOCKED", rows[probe]


# ------------------------------------------------------------------ each check can fail

def _run_with(prefix: list[str], jail: bool = False) -> dict[str, tuple[str, str]]:
    """Run the checks (from the repo) inside `prefix`, a sandbox we build ourselves."""
    sys.path.insert(0, str(REPO))
    from claude_sandbox.tools import verify

    environ = {**os.environ, **({} if jail else JAIL_OFF)}
    rows, _ = verify.run_suite("claude", directory=str(REPO / "verification"), prefix=prefix,
                               environ=environ, outside_checks=False)
    # A sandbox that never ran the checks fails every one of them: that proves nothing.
    assert all(r.detail != "the sandbox did not start" for r in rows), rows[0]
    return {r.id: (r.outcome, r.detail) for r in rows}


def _bwrap(*drop: str) -> list[str]:
    home = os.path.expanduser("~")
    ops = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
           "--cap-drop", "ALL", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
           "--tmpfs", "/tmp", "--tmpfs", home,
           # The checks run from this checkout, which may itself be under /tmp or $HOME.
           "--ro-bind", str(REPO), str(REPO),
           "--ro-bind", "/dev/null", f"{home}/.netrc",
           "--ro-bind", "/dev/null", f"{home}/.Xauthority",
           "--setenv", "IS_SANDBOX", "1", "--setenv", "IS_SANDBOX_AGENT", "claude"]
    for option in drop:
        index = ops.index(option)
        width = {"--cap-drop": 2, "--tmpfs": 2}.get(option, 1)
        del ops[index:index + width]
    return ["flock", LOCK, "bwrap", *ops, "--bind", "{WORKDIR}", "{WORKDIR}", "--"]


@pytest.fixture()
def weakened(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A prefix whose {WORKDIR} is filled in with the run's workspace."""
    from claude_sandbox.tools import verify

    real_launch = verify.launch

    def launch(prefix, directory, workdir, environ, adversarial, inherited=(), brokered=False):  # type: ignore[no-untyped-def]
        prefix = [workdir if p == "{WORKDIR}" else p for p in prefix]
        return real_launch(prefix, directory, workdir, environ, adversarial, inherited, brokered)

    monkeypatch.setattr(verify, "launch", launch)
    return _bwrap


@pytest.mark.parametrize(("drop", "check"), [
    ("--cap-drop", "06"),
    ("--unshare-ipc", "08"),
    ("--unshare-uts", "09"),
    ("--unshare-pid", "07"),
])
def test_a_weakened_sandbox_fails_the_check(weakened, drop: str, check: str) -> None:  # type: ignore[no-untyped-def]
    if os.getuid() != 0:
        pytest.skip("--cap-drop is meaningful as root")
    results = _run_with(weakened(drop))
    assert results[check][0] == "FAIL", results[check]


def test_a_launcher_that_passes_its_descriptors_on_fails_check_61(weakened) -> None:  # type: ignore[no-untyped-def]
    # flock and a bare bwrap keep what they inherit: the runner's planted descriptor.
    results = _run_with(weakened())
    assert results["61"][0] == "FAIL", results["61"]


def test_a_writable_venv_bind_fails_purity(weakened) -> None:  # type: ignore[no-untyped-def]
    prefix = weakened()
    prefix[-1:-1] = ["--bind", "/usr/libexec/claude-sandbox/venv",
                     "/usr/libexec/claude-sandbox/venv"]
    results = _run_with(prefix)
    assert results["26"][0] == "FAIL", results["26"]
    assert results["34"][0] == "FAIL", results["34"]


def test_a_missing_mask_fails(weakened) -> None:  # type: ignore[no-untyped-def]
    prefix = weakened()
    home = os.path.expanduser("~")
    index = prefix.index(f"{home}/.netrc")
    del prefix[index - 2:index + 1]
    results = _run_with(prefix)
    assert results["14"][0] == "FAIL", results["14"]


def test_a_sandbox_that_lets_written_binaries_run_fails_check_50(
        weakened, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The operator asked for harsh (the outside's facts say so); this sandbox has no
    Landlock domain, so a binary written to the workspace runs."""
    from claude_sandbox.tools import verify

    real_gather = verify.gather
    monkeypatch.setattr(verify, "gather",
                        lambda *args: {**real_gather(*args), "hardening": "harsh"})
    results = _run_with(weakened())
    assert results["50"][0] == "FAIL", results["50"]
    assert "a binary written here ran:" in results["50"][1], results["50"]


def test_plants_in_an_unprotected_workspace_run_outside_and_fail_check_54(weakened) -> None:  # type: ignore[no-untyped-def]
    """Without the control-file binds the plants land, and the real agents and git,
    started outside, run them: the detection works. Claude Code's own plants still do
    not run: the unwrapped-only managed policy stops them even when written."""
    results = _run_with(weakened())
    outcome, detail = results["54"]
    assert outcome == "FAIL" and "ran outside:" in detail, detail
    for marker in ("git-fsmonitor", "pi-project-extension"):
        assert marker in detail, detail
    assert "claude-project-hook" not in detail and "claude-project-mcp" not in detail, detail


def test_a_network_namespace_of_its_own_fails_the_jail_lock() -> None:
    """Check 47 fails where the checks hold CAP_NET_ADMIN over their namespace."""
    results = _run_with(["flock", LOCK, "unshare", "--user", "--map-root-user", "--net", "--"],
                        jail=True)
    assert results["47"][0] == "FAIL", results["47"]


@pytest.mark.parametrize(("shebang", "fired"), [
    ("#!/bin/bash", ("bash-env", "bash-function")),  # not privileged: start-up files run
    ("#!/bin/bash -p", ("bin-python3",)),  # privileged, but the interpreter found on PATH
])
def test_a_redirectable_launcher_fails_check_48(tmp_path: Path, shebang: str,
                                                fired: tuple[str, ...]) -> None:
    sys.path.insert(0, str(REPO / "verification"))
    import outside  # type: ignore[import-not-found]

    shim = tmp_path / "shim"
    shim.write_text(f"{shebang}\nexec python3 -c pass\n")
    shim.chmod(0o755)
    result = outside.check_48_not_redirectable(str(shim), "claude", str(tmp_path),
                                               dict(os.environ))
    assert result.outcome == "FAIL", result
    assert all(name in result.detail for name in fired), result


def test_a_launcher_whose_helper_survives_it_fails_check_49(tmp_path: Path) -> None:
    """A "launcher" that leaves a helper behind when SIGKILLed.

    The helper leaves the launcher's session, waits, and only then becomes a
    program with a harmless name: the check must follow the launch's processes
    themselves, not names or what runs at the first glance."""
    sys.path.insert(0, str(REPO / "verification"))
    import outside  # type: ignore[import-not-found]

    helper = tmp_path / "innocuous"
    shutil.copy("/bin/sleep", helper)
    shim = tmp_path / "shim"
    shim.write_text(f'#!/bin/bash\nsetsid /bin/sh -c "/bin/sleep 0.5; exec {helper} 300" '
                    '</dev/null >/dev/null 2>&1 &\n'
                    'exec /bin/sleep "${@: -1}"\n')
    shim.chmod(0o755)
    try:
        result = outside.check_49_killed_launcher(str(shim), "claude", str(tmp_path),
                                                  dict(os.environ), settle=1.0)
    finally:
        subprocess.run(["pkill", "-KILL", "-f", str(helper)], check=False)
        deadline = time.monotonic() + 5  # reap what the check's subreaper role adopted
        while time.monotonic() < deadline and subprocess.run(
                ["pgrep", "-f", str(helper)], capture_output=True).returncode == 0:
            time.sleep(0.05)
        outside._reap_children()
    assert result.outcome == "FAIL", result
    assert "still running after the launcher's SIGKILL" in result.detail, result


@pytest.mark.parametrize(("keeps", "number"), [
    ("", "9, 1500"),  # a helper that closes nothing
    ("exec 9<&-; ", "1500"),  # one that closes up to the soft limit, not above it
])
def test_a_launcher_whose_helper_keeps_its_descriptors_fails_check_102(
        tmp_path: Path, keeps: str, number: str) -> None:
    """A "launcher" that leaves what it inherited open in a process it starts."""
    sys.path.insert(0, str(REPO / "verification"))
    import outside_fds  # type: ignore[import-not-found]

    shim = tmp_path / "shim"
    shim.write_text(f'#!/bin/bash\n({keeps}exec /bin/sleep 300) &\n'
                    'exec /bin/sleep "${@: -1}"\n')
    shim.chmod(0o755)
    try:
        result = outside_fds.check_102_no_inherited_descriptor_outside(
            str(shim), "claude", str(tmp_path), dict(os.environ))
    finally:
        subprocess.run(["pkill", "-KILL", "-f", "/bin/sleep 300"], check=False)
    assert result.outcome == "FAIL", result
    # The helper is the background subshell, named sleep once it has exec'd and shim
    # before: either holds the descriptor, and the check may look before the exec.
    assert result.detail.split("[", 1)[0] in ("sleep", "shim"), result
    assert result.detail.endswith(f"at {number}"), result


def test_a_launcher_that_keeps_sigchld_ignored_fails_check_103(tmp_path: Path) -> None:
    """A "launcher" that waits for its session with SIGCHLD still ignored gets no status."""
    sys.path.insert(0, str(REPO / "verification"))
    import outside_fds  # type: ignore[import-not-found]

    shim = tmp_path / "shim"
    shim.write_text("#!/usr/bin/python3\nimport subprocess, sys\n"
                    "sys.exit(subprocess.Popen(sys.argv[sys.argv.index('--') + 1:]).wait())\n")
    shim.chmod(0o755)
    result = outside_fds.check_103_sigchld_ignored_launcher(str(shim), "claude",
                                                            str(tmp_path), dict(os.environ))
    assert result.outcome == "FAIL", result
    assert "not the session's 7" in result.detail, result


def test_outside_any_sandbox_most_checks_fail() -> None:
    results = _run_with([])
    failed = {n for n, (outcome, _) in results.items() if outcome == "FAIL"}
    for number in ("01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "14",
                   "15", "16", "17", "41"):
        assert number in failed, (number, results[number])


def test_a_sandbox_that_binds_the_whole_root_fails_check_72(weakened) -> None:  # type: ignore[no-untyped-def]
    """`--ro-bind / /` shows every other tree of /: /srv, /mnt, a sibling, /root or the
    other homes, and leaves the sandbox's root what the host's is."""
    results = _run_with(weakened())
    assert results["72"][0] == "FAIL", results["72"]


def test_check_74_fails_where_the_plants_land() -> None:
    """The same plants in a live session reach the workspace, and the programs run
    outside then run them: the check sees it. git's hook and fsmonitor stay held (the
    git directory is an overlay in live mode too)."""
    sys.path.insert(0, str(REPO / "verification"))
    import outside  # type: ignore[import-not-found]

    env = {**os.environ, "CLAUDE_SANDBOX_EGRESS_JAIL": "0"}
    result = outside.check_74_review_plants_run_nothing_outside(
        "/usr/local/bin/claude-sandbox", "claude", os.path.expanduser("~"), env, mode="live")
    assert result.outcome == "FAIL", result
    for fired in ("activate", "npm", "pyc", "cargo"):
        assert fired in result.detail, result
    assert "git-hook" not in result.detail and "fsmonitor" not in result.detail, result
    review = outside.check_74_review_plants_run_nothing_outside(
        "/usr/local/bin/claude-sandbox", "claude", os.path.expanduser("~"), env)
    assert review.outcome == "PASS", review


def test_verify_sees_a_brokered_credential_through_checks_83_to_87(
        tmp_path: Path, echo_hosts: dict[str, str]) -> None:
    """A credential declared for the test internet's echo host: the sentinel inside (83),
    no broker key there (84), the real value at its host only, over TLS only (85-87), and
    the broker's probes (A53-A56) blocked."""
    if os.getuid() != 0:
        pytest.skip("needs root to bind a config over /etc")
    conf = tmp_path / "claude-sandbox.conf"
    conf.write_text("credential = ECHO_TOKEN api.cred.test\nallow-domain = api.cred.test\n"
                    "allow-domain = other.cred.test\n")
    script = (f"mount --bind {conf} /etc/claude-sandbox.conf && "
              f"mount --bind {echo_hosts['hosts']} /etc/hosts && "
              f"mount --bind {echo_hosts['bundle']} /etc/ssl/certs/ca-certificates.crt && "
              f"exec {SHIM} verify --json --quick --adversarial --agent claude "
              "--echo-host api.cred.test other.cred.test")
    result = subprocess.run(["flock", LOCK, "unshare", "-m", "--propagation", "private",
                             "sh", "-c", script], capture_output=True, text=True, check=False,
                            cwd="/tmp", timeout=600,
                            env={**os.environ, "ECHO_TOKEN": "ghp_" + "VerifyRealValue1" * 2})
    report = json.loads(result.stdout or "{}")
    assert result.returncode == 0 and not _failures(report), (_failures(report), result.stderr)
    rows = {r["id"]: r for r in report["rows"]}
    assert all(rows[n]["outcome"] == "PASS" for n in ("83", "84", "85", "86", "87")), \
        [rows[n] for n in ("83", "84", "85", "86", "87")]
    probes = ("A53", "A54", "A55", "A56")
    assert all(rows[n]["outcome"] == "BLOCKED" for n in probes), [rows[n] for n in probes]


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_check_94_passes_through_the_installed_shims(tmp_path: Path, agent: str) -> None:
    sys.path.insert(0, str(REPO / "verification"))
    import outside  # type: ignore[import-not-found]

    result = outside.check_94_quick_questions_unsteerable(agent, str(tmp_path),
                                                          dict(os.environ))
    assert result.outcome == "PASS", result


@pytest.mark.parametrize(("runs", "fired"), [
    ('exec /usr/libexec/claude-sandbox/real/codex "$@"', "bin-node"),  # the caller's PATH
    ('PATH=/usr/bin:/bin exec /usr/libexec/claude-sandbox/real/codex "$@"', "node"),
])
def test_a_quick_path_that_passes_the_environment_fails_check_94(tmp_path: Path, runs: str,
                                                                  fired: str) -> None:
    """A "shim" that answers --version from the real program but keeps the caller's
    environment: the planted node, or the planted NODE_OPTIONS, runs, and the check
    says so."""
    sys.path.insert(0, str(REPO / "verification"))
    import outside

    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "codex").write_text(f"#!/bin/sh\n{runs}\n")
    (shims / "codex").chmod(0o755)
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = outside.check_94_quick_questions_unsteerable(
        "codex", str(workdir), dict(os.environ), shim_dir=str(shims))
    assert result.outcome == "FAIL", result
    assert result.detail.endswith(f"planted code ran: {fired}"), result
