"""The UserPromptSubmit gate and SessionStart check, invoked as Claude Code invokes them.

Claude Code runs a command hook with the event as JSON on stdin and its own
environment (CLAUDE_PROJECT_DIR, ...); for UserPromptSubmit exit 2 blocks the
prompt and shows stderr to the user. The installed hook script is used when it
is present and current; otherwise the same code runs from this checkout under
the installed core interpreter (the sandbox hides other venvs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from claude_sandbox.core import paths
from claude_sandbox.install import integrity

REPO = Path(__file__).resolve().parents[2]
CORE_PYTHON = f"{paths.CORE_VENV}/bin/python"
SHELL = f"{paths.SHIM_DIR}/claude-sandbox"
LOCK = "/tmp/claude-sandbox-ns.lock"
SESSION, GATE = integrity.HOOKS


def _command(hook: integrity.Hook) -> list[str]:
    installed = integrity.hook_path(hook)
    try:
        current = Path(installed).read_text() == integrity.hook_text(hook)
    except OSError:
        current = False
    if current:
        return [installed]
    body = integrity.hook_text(hook).split("\n", 1)[1]
    return [CORE_PYTHON, "-I", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r})\n{body}"]


def _event(name: str) -> str:
    return json.dumps({
        "session_id": "abc123", "transcript_path": "/nonexistent/t.jsonl", "cwd": str(REPO),
        "permission_mode": "default", "hook_event_name": name, "prompt": "hello",
        "source": "startup",
    })


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, CLAUDE_PROJECT_DIR=str(REPO), CLAUDE_SANDBOX_EGRESS_JAIL="0")
    env.update(extra)
    return env


def _run(argv: list[str], event: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, input=_event(event), env=env, capture_output=True, text=True,
                          timeout=120, check=False, cwd=REPO)


needs_core = pytest.mark.skipif(not os.access(CORE_PYTHON, os.X_OK),
                                reason=f"no installed core interpreter at {CORE_PYTHON}")
needs_sandbox = pytest.mark.skipif(not os.access(SHELL, os.X_OK) or shutil.which("flock") is None,
                                   reason="claude-sandbox is not installed here")


# ---------------------------------------------------------------- pure decisions

def test_gate_decisions() -> None:
    assert integrity.prompt_gate(inside=True, allowed=False) == (0, "", "")
    status, out, err = integrity.prompt_gate(inside=False, allowed=False)
    assert status == integrity.EXIT_BLOCK and out == "" and "NOT SANDBOXED" in err
    status, out, err = integrity.prompt_gate(inside=False, allowed=True)
    assert status == 0 and "NOT SANDBOXED" in json.loads(out)["systemMessage"]
    status, out, _ = integrity.session_start(inside=False)
    assert status == 0 and "NOT SANDBOXED" in json.loads(out)["systemMessage"]
    assert integrity.session_start(inside=True) == (0, "", "")


def test_the_refusing_helper_runs_nothing_and_hands_an_allowed_session_its_key() -> None:
    assert integrity.refuse_helper(False, {"ANTHROPIC_API_KEY": "k"})[0] == 1
    assert integrity.refuse_helper(True, {})[0] == 1
    assert integrity.refuse_helper(True, {"ANTHROPIC_API_KEY": "k"}) == (0, "k\n", "")


def test_flag_counts_only_root_owned_and_unwritable(tmp_path: Path) -> None:
    flag = tmp_path / "allow"
    assert not integrity.allow_flag_set(str(flag))
    flag.write_text("")
    flag.chmod(0o644)
    if os.getuid() == 0:
        assert integrity.allow_flag_set(str(flag))
        flag.chmod(0o666)
        assert not integrity.allow_flag_set(str(flag))
        flag.chmod(0o644)
        os.chown(flag, 65534, 65534)
        assert not integrity.allow_flag_set(str(flag))
        link = tmp_path / "link"
        link.symlink_to("/etc/passwd")
        assert not integrity.allow_flag_set(str(link))
    else:
        assert not integrity.allow_flag_set(str(flag))


def test_unknown_role_blocks(capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # noqa: SIM115
    assert integrity.hook_main("nonsense") == integrity.EXIT_BLOCK


# ---------------------------------------------------------------- as Claude Code runs them

@needs_core
@pytest.mark.parametrize("forged", [{}, {"IS_SANDBOX": "1"}], ids=["plain", "forged-IS_SANDBOX"])
def test_gate_blocks_outside(forged: dict[str, str]) -> None:
    result = _run(_command(GATE), "UserPromptSubmit", _env(**forged))
    assert result.returncode == integrity.EXIT_BLOCK, result
    assert "NOT SANDBOXED" in result.stderr
    assert integrity.ALLOW_FLAG in result.stderr


@needs_core
def test_gate_blocks_outside_as_a_normal_user() -> None:
    setpriv = paths.find_tool("setpriv")
    if os.getuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to become a normal user")
    argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs",
            *_command(GATE)]
    result = _run(argv, "UserPromptSubmit", _env(IS_SANDBOX="1"))
    # no_new_privs and CapEff 0 are both true here; only the mount is missing.
    assert result.returncode == integrity.EXIT_BLOCK, result


@needs_core
def test_session_start_warns_outside() -> None:
    result = _run(_command(SESSION), "SessionStart", _env(IS_SANDBOX="1"))
    assert result.returncode == 0, result
    assert "NOT SANDBOXED" in json.loads(result.stdout)["systemMessage"]


@needs_core
@needs_sandbox
@pytest.mark.integration
@pytest.mark.parametrize("hook", [GATE, SESSION], ids=lambda h: h.name)
def test_hooks_pass_inside(hook: integrity.Hook) -> None:
    argv = ["flock", LOCK, SHELL, "shell", "--", *_command(hook)]
    result = _run(argv, hook.event, _env())
    assert result.returncode == 0, result
    assert result.stdout == ""
    assert "NOT SANDBOXED" not in result.stderr


@needs_core
@pytest.mark.integration
def test_flag_file_downgrades_the_block_to_a_warning() -> None:
    unshare = paths.find_tool("unshare")
    if os.getuid() != 0 or unshare is None:
        pytest.skip("needs root for a private mount namespace")
    # A private mount namespace: the flag appears on a tmpfs over /etc that no
    # one else sees, so the real machine's /etc is never touched.
    script = (
        "set -e; mount --make-rprivate /; mount -t tmpfs -o mode=0755 tmpfs /etc; "
        f"install -m 0644 /dev/null {integrity.ALLOW_FLAG}; exec \"$@\""
    )
    argv = [unshare, "--mount", "sh", "-c", script, "sh", *_command(GATE)]
    result = _run(argv, "UserPromptSubmit", _env(IS_SANDBOX="1"))
    assert result.returncode == 0, result
    assert "NOT SANDBOXED" in json.loads(result.stdout)["systemMessage"]
    assert integrity.ALLOW_FLAG in result.stderr


# ---------------------------------------------------------------- the real Claude Code

REAL_CLAUDE = f"{paths.REAL_BIN_DIR}/claude"


def _gate_installed() -> bool:
    try:
        settings = json.loads(Path(integrity.MANAGED_SETTINGS).read_text())
    except (OSError, ValueError):
        return False
    return integrity.hook_path(GATE) in json.dumps(settings.get("hooks", {}))


needs_claude = pytest.mark.skipif(
    not os.access(REAL_CLAUDE, os.X_OK) or not _gate_installed(),
    reason="needs the installed Claude Code and our managed settings",
)


def _claude(argv: list[str], home: Path) -> str:
    # A print-mode prompt with a dummy key: UserPromptSubmit hooks run before any
    # request, so no network or account is needed to see the gate's verdict.
    env = dict(os.environ, HOME=str(home), ANTHROPIC_API_KEY="sk-ant-dummy",
               CLAUDE_SANDBOX_EGRESS_JAIL="0")
    result = subprocess.run([*argv, "-p", "hello", "--output-format", "json"], env=env,
                            capture_output=True, text=True, timeout=180, check=False, cwd=REPO)
    return result.stdout + result.stderr


@needs_claude
@pytest.mark.integration
def test_real_claude_is_blocked_unsandboxed(tmp_path: Path) -> None:
    out = _claude([REAL_CLAUDE], tmp_path)
    assert "UserPromptSubmit operation blocked by hook" in out, out
    assert "NOT SANDBOXED" in out


@needs_claude
@needs_sandbox
@pytest.mark.integration
def test_real_claude_is_not_blocked_inside(tmp_path: Path) -> None:
    out = _claude(["flock", LOCK, f"{paths.SHIM_DIR}/claude"], tmp_path)
    assert "blocked by hook" not in out, out
    assert "NOT SANDBOXED" not in out
