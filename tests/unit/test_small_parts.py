"""Pure pieces of the launch core: the nesting fact, the gitconfig, the secrets probe,
the quoting of a suggested command."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from claude_sandbox.core import guard, paths
from claude_sandbox.launch.facts import gitconfig

MOUNTINFO = (
    "22 1 0:21 / / ro,relatime - overlay overlay rw\n"
    f"40 22 0:5 /null {paths.INSIDE_MARKER} ro,nosuid - devtmpfs udev rw\n"
)
STATUS_IN = "Name:\tsh\nNoNewPrivs:\t1\nCapEff:\t0000000000000000\n"


def test_nesting_fact_needs_all_three() -> None:
    assert guard.facts_say_inside(MOUNTINFO, STATUS_IN)
    assert not guard.facts_say_inside(MOUNTINFO.splitlines()[0], STATUS_IN)  # no marker mount
    assert not guard.facts_say_inside(
        MOUNTINFO, STATUS_IN.replace("NoNewPrivs:\t1", "NoNewPrivs:\t0")
    )
    assert not guard.facts_say_inside(
        MOUNTINFO, STATUS_IN.replace("0000000000000000", "000001ffffffffff")
    )


def test_the_environment_plays_no_part() -> None:
    # The decision reads /proc only: a forged IS_SANDBOX=1 cannot change it.
    import inspect

    source = inspect.getsource(guard)
    assert "os.environ" not in source and "getenv" not in source


def test_gitconfig_quotes_values_and_resets_helpers() -> None:
    text = gitconfig.render(gitconfig.Identity('A "B" \\C', "a@b"), {"github.com": "/usr/bin/gh"})
    assert '\tname = "A \\"B\\" \\\\C"' in text
    assert (
        '[credential "https://github.com"]\n\thelper =\n\thelper = '
        '"!/usr/bin/gh auth git-credential"'
        in text
    )
    assert "insteadOf = git@github.com:" in text


def test_no_forge_means_no_helpers() -> None:
    assert gitconfig.forge_helpers(no_forge=True) == {}
    text = gitconfig.render(gitconfig.Identity("a", "b"), {})
    assert "credential" not in text


def test_identity_comes_from_the_users_global_git_config(tmp_path: pytest.TempPathFactory) -> None:
    import os

    home = str(tmp_path)
    fallback = gitconfig.identity("dev", home)  # no global file: git is not even started
    assert fallback == gitconfig.Identity("dev", f"dev@{os.uname().nodename}")
    with open(os.path.join(home, ".gitconfig"), "w") as handle:
        handle.write('[user]\n\tname = Dev Eloper\n\temail = dev@example.org\n')
    assert gitconfig.identity("dev", home) == gitconfig.Identity("Dev Eloper", "dev@example.org")


def test_a_squatted_scratch_directory_falls_back_to_the_store(tmp_path: object) -> None:
    """Another local user can make /var/tmp/claude-agent-UID first; the launch then uses
    the store instead of refusing."""
    import os

    from claude_sandbox.launch.facts.hostfacts import agent_tmp_dir

    base = os.path.join(str(tmp_path), "claude-agent")
    me = os.getuid()
    fallback = os.path.join(str(tmp_path), "store", "tmp")
    assert agent_tmp_dir(base, me, fallback) == base  # absent: ours to make
    os.mkdir(base)
    assert agent_tmp_dir(base, me, fallback) == base  # ours
    other = me + 4242
    assert agent_tmp_dir(base, other, fallback) == f"{base}-{other}"  # someone else's base
    os.mkdir(f"{base}-{other}")  # made first by another user (here: owned by us, not them)
    assert agent_tmp_dir(base, other, fallback) == fallback
    os.rmdir(f"{base}-{other}")
    os.symlink("/etc", f"{base}-{other}")  # or a link anywhere
    assert agent_tmp_dir(base, other, fallback) == fallback


def test_a_shell_commands_path_is_made_absolute_and_a_private_one_is_named() -> None:
    import pytest

    from claude_sandbox.core.errors import SandboxError
    from claude_sandbox.launch.facts.gather import resolve_command

    def seen_as(directory: str) -> str | None:
        return None if directory == "/tmp" or directory.startswith("/tmp/") else directory

    assert resolve_command(["./script.sh"], "/usr/bin", seen_as, "/work/project") == \
        "/work/project/script.sh"
    assert resolve_command(["tools/../run"], "/usr/bin", seen_as, "/work/project") == \
        "/work/project/run"
    with pytest.raises(SandboxError) as refused:
        resolve_command(["/tmp/x.sh"], "/usr/bin", seen_as, "/work/project")
    assert refused.value.status == 127 and "private inside the sandbox" in str(refused.value)


def test_what_a_cap_did_is_said_in_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    import resource

    from claude_sandbox.launch.planner.limits import LimitPlan
    from claude_sandbox.launch.session import notices

    notices.caps({"oom_kill": 2, "pids_max": 5}, 137, LimitPlan((), (), ()))
    said = capsys.readouterr().err
    assert "killed 2 process(es)" in said and "refused 5 new process(es)" in said
    per_process = LimitPlan((), ((resource.RLIMIT_DATA, 512 << 20),), ())
    notices.caps({}, 134, per_process)
    assert "RLIMIT_DATA 536870912" in capsys.readouterr().err
    notices.caps({}, 0, per_process)
    notices.caps({}, 137, per_process)  # a kill from outside is not the cap's
    assert capsys.readouterr().err == ""


def test_toolchain_secrets_are_found_as_glob_would_and_the_home_is_literal(
        tmp_path: pathlib.Path) -> None:
    import glob

    from claude_sandbox.launch.facts import hostfacts
    from claude_sandbox.launch.planner import mounts

    for home in (tmp_path / "plain", tmp_path / "odd [a-z]*?"):
        for version in ("3.11.7", "3.12.1", ".hidden"):
            (home / ".pyenv/versions" / version).mkdir(parents=True)
            (home / ".pyenv/versions" / version / "pip.conf").write_text("[global]\n")
        (home / ".pyenv/versions/3.12.1/.pypirc").mkdir()  # a directory: not a file
        (home / ".nvm/versions/node/v20/etc").mkdir(parents=True)
        (home / ".nvm/versions/node/v20/etc/npmrc").write_text("//r/:_authToken=x\n")
        found = hostfacts.probe_secrets(str(home), mounts.TOOLCHAIN_SECRETS)
        assert found == (f"{home}/.nvm/versions/node/v20/etc/npmrc",
                         f"{home}/.pyenv/versions/3.11.7/pip.conf",
                         f"{home}/.pyenv/versions/3.12.1/pip.conf")
        if home.name == "plain":  # glob reads a plain home the same way
            expected = [p for g in mounts.TOOLCHAIN_SECRETS
                        for p in sorted(glob.glob(f"{home}/{g}")) if os.path.isfile(p)]
            assert list(found) == expected
    assert hostfacts.probe_secrets(str(tmp_path / "absent"), mounts.TOOLCHAIN_SECRETS) == ()


def test_the_only_wildcard_of_the_secret_patterns_is_a_whole_star() -> None:
    from claude_sandbox.launch.planner import mounts

    for pattern in mounts.TOOLCHAIN_SECRETS:
        for part in pattern.split("/"):
            assert part == "*" or not set(part) & set("*?["), pattern


@pytest.mark.parametrize("path", ["/w/.envrc", "/w/it's here", "/w/$(touch x)`y`", "/w/a b\nc"])
def test_a_path_in_a_suggested_command_is_one_word(path: str) -> None:
    from claude_sandbox.launch.overlay import controlexit

    said = subprocess.run(["sh", "-c", f"printf %s {controlexit.quote(path)}"],
                          capture_output=True, text=True, check=True).stdout
    assert said == path


@pytest.mark.skipif(os.getuid() != 0, reason="mounts a tmpfs where the directory is removed")
def test_a_private_directory_that_cannot_be_removed_is_one_warning(tmp_path: pathlib.Path
                                                                   ) -> None:
    """A launch's end that cannot remove its private directory says so in one line and
    goes on: the launch's own status and message are not lost to the error."""
    private = tmp_path / "claude-sandbox-jail.0.1.2.abc"
    (private / "busy").mkdir(parents=True)
    code = ("import sys; from claude_sandbox.jail import dirs; "
            f"dirs.remove_at_teardown({str(private)!r}); print('went on')")
    ran = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         'mount -t tmpfs none "$1" && exec "$2" -c "$3"', "sh", str(private / "busy"),
         sys.executable, code], capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2])})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "went on\n"
    assert ran.stderr.count("\n") == 1 and "warning: cannot remove" in ran.stderr, ran.stderr


def test_an_inherited_descriptor_is_marked_close_on_exec_and_no_spawned_program_gets_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from claude_sandbox.core import process

    monkeypatch.setattr(process, "_inherited_marked", False)  # put back after the test
    read, write = os.pipe()
    try:
        os.set_inheritable(read, True)  # as a descriptor the launcher inherited is
        assert process.cloexec_inherited()
        assert not os.get_inheritable(read)
        shown = subprocess.run(["ls", "/proc/self/fd"], capture_output=True, text=True,
                               close_fds=False, check=True).stdout.split()
        assert str(read) not in shown
        for fd in (0, 1, 2):  # the standard streams stay as they are
            assert os.get_inheritable(fd)
    finally:
        os.close(read)
        os.close(write)


def test_a_captured_tool_is_spawned_once_inherited_descriptors_are_marked_and_gets_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """git's answers are read through capture: spawned, not forked, once the launcher has
    marked what it inherited (a fork of the launcher cost 2 ms a launch), and then no
    inherited descriptor reaches the tool either way."""
    from claude_sandbox.core import process, spawn

    real_fork_exec = spawn.fork_exec
    forked: list[object] = []

    def counted(*args: object, **kwargs: object) -> process.Child:
        forked.append(args)
        return real_fork_exec(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(spawn, "fork_exec", counted)
    monkeypatch.setattr(process, "_inherited_marked", False)
    read, write = os.pipe()
    try:
        os.set_inheritable(read, True)  # as a descriptor the launcher inherited is
        status, listed = spawn.capture(["/bin/ls", "/proc/self/fd"], {})
        assert status == 0 and str(read) not in listed.split() and len(forked) == 1
        os.set_inheritable(read, True)
        assert process.cloexec_inherited()
        status, listed = spawn.capture(["/bin/ls", "/proc/self/fd"], {})
        assert status == 0 and str(read) not in listed.split() and len(forked) == 1
        assert spawn.capture(["/bin/sh", "-c", "head -c 3000000 /dev/zero"], {},
                               limit=1 << 20) == (-1, "")
        assert spawn.capture(["/bin/sh", "-c", "kill -PIPE $$; echo no"], {}) == (
            -13, "")  # SIGPIPE at its default in the tool, as fork_exec leaves it
        # A program that cannot be run: 127 either way, as a shell says, no exception.
        assert spawn.capture(["/nonexistent-csbx/git"], {}) == (127, "")
        monkeypatch.setattr(process, "_inherited_marked", False)
        assert spawn.capture(["/nonexistent-csbx/git"], {}) == (127, "")
    finally:
        os.close(read)
        os.close(write)


def test_the_kernels_resource_numbers_are_the_resource_modules() -> None:
    """The plan's caps name resources by core/kernel.py's numbers, which the inner stage
    hands to setrlimit: the same as this interpreter's resource module."""
    import resource

    from claude_sandbox.core import kernel

    assert (kernel.RLIMIT_DATA, kernel.RLIMIT_CORE, kernel.RLIMIT_NPROC) == (
        resource.RLIMIT_DATA, resource.RLIMIT_CORE, resource.RLIMIT_NPROC)


@pytest.mark.parametrize("soft", [None, 5000])
def test_the_soft_limit_read_through_libc_is_getrlimits(soft: int | None) -> None:
    """The pids cap's soft RLIMIT_NPROC, read through libc (cgroups._soft_limit), is the
    resource module's, unlimited (all ones) or not."""
    code = ("import resource, sys; from claude_sandbox.core import kernel; "
            "from claude_sandbox.launch.session import cgroups; "
            f"soft = {soft!r}; "
            "soft is None or resource.setrlimit(resource.RLIMIT_NPROC, "
            "(soft, resource.getrlimit(resource.RLIMIT_NPROC)[1])); "
            "expected = resource.getrlimit(resource.RLIMIT_NPROC)[0]; "
            "got = cgroups._soft_limit(kernel.RLIMIT_NPROC); "
            "print(got == (kernel.RLIM_INFINITY if expected == resource.RLIM_INFINITY "
            "else expected), got)")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert ran.stdout.startswith("True"), ran.stdout


def test_terminal_safe_escapes_what_a_terminal_would_obey() -> None:
    from claude_sandbox.core.streams import terminal_safe

    assert terminal_safe("plain text: ok") == "plain text: ok"
    assert terminal_safe("a\x1b]0;x\x07b\r\u202e") == "a\\x1b]0;x\\x07b\\r\\u202e"
    assert terminal_safe(terminal_safe("\x1b[2K")) == "\\x1b[2K"  # once is enough


def test_the_pids_cap_never_exceeds_the_users_own_process_limit() -> None:
    """The inner stage sets the cap as soft and hard limit; above the user's own it is
    refused (EPERM), so a default's floor of 64 refused every launch under `ulimit -u 63`."""
    from claude_sandbox.core import kernel
    from claude_sandbox.launch.planner import limits
    from claude_sandbox.launch.session.cgroups import CgroupFacts

    def nproc(facts: CgroupFacts, max_pids: int | None = None) -> int:
        plan = limits.plan_limits(max_pids, None, facts, 1000)
        return dict(plan.rlimits)[kernel.RLIMIT_NPROC]

    assert nproc(CgroupFacts(pids_limit=63, nproc=63)) == 63
    assert nproc(CgroupFacts(pids_limit=63, nproc=63), max_pids=500) == 63
    assert nproc(CgroupFacts(pids_limit=10000, nproc=10000)) == limits.DEFAULT_PIDS
    assert nproc(CgroupFacts()) == limits.DEFAULT_PIDS  # no limit of the user's
