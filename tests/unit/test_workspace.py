"""Which paths may be writable: refusals name the path, the reason and where it came from."""

from __future__ import annotations

import pytest

from claude_sandbox.core.errors import EXIT_CONFIG, SandboxError
from claude_sandbox.launch.facts import workspace

RULES = workspace.PathRules(
    home="/home/dev",
    homes=("/home/dev", "/root", "/home/other"),
    path_dirs=("/home/dev/bin", "/opt/venv/bin", "/usr/bin"),
    store="/home/dev/.local/state/claude-sandbox",
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", "root directory"),
        ("/home/dev", "your home directory"),
        ("/home", "contains the home directory"),
        ("/home/other", "is the home directory /home/other"),
        ("/home/dev/.ssh", "under /home/dev/.ssh"),
        ("/home/dev/.ssh/keys", "under /home/dev/.ssh"),
        ("/home/dev/.bashrc", "under /home/dev/.bashrc"),
        ("/home/dev/.config/autostart", "under /home/dev/.config"),
        ("/home/dev/.config/systemd", "under /home/dev/.config"),
        ("/home/dev/.local/bin", "under /home/dev/.local"),
        ("/home/dev/.claude", "under /home/dev/.claude"),
        ("/home/dev/.claude.json", "under /home/dev/.claude.json"),
        ("/home/dev/.codex", "under /home/dev/.codex"),
        ("/home/dev/.pi", "under /home/dev/.pi"),
        ("/home/dev/.gnupg", "under /home/dev/.gnupg"),
        ("/root/.bashrc", "under /root/.bashrc"),
        ("/home/other/.profile", "under /home/other/.profile"),
        ("/home/dev/bin", "on PATH"),
        ("/opt/venv/bin/x", "on PATH"),
        ("/etc", "under /etc"),
        ("/etc/cron.d", "under /etc"),
        ("/usr/local/bin", "under /usr"),
        ("/var/lib/dpkg", "under /var/lib"),
        ("/var/spool/cron", "under /var/spool"),
        ("/boot", "under /boot"),
        ("/proc/1", "under /proc"),
        ("/sys", "under /sys"),
        ("/dev/shm", "under /dev"),
        ("/run/user/1000", "under /run"),
        ("/var", "contains /var/lib"),
        ("/tmp", "/tmp itself"),
        ("/var/tmp", "/var/tmp itself"),
    ],
)
def test_refused(path: str, expected: str) -> None:
    reason = workspace.forbidden_reason(path, RULES)
    assert reason is not None and expected in reason, reason


def test_a_store_elsewhere_is_refused_too() -> None:
    rules = workspace.PathRules("/home/dev", (), (), "/srv/state/1000")
    for path in ("/srv/state/1000", "/srv/state/1000/claude", "/srv/state"):
        assert "state store" in str(workspace.forbidden_reason(path, rules))


@pytest.mark.parametrize("path", ["/home/dev/projects/app", "/workspaces/app", "/srv/app",
                                  "/tmp/ws", "/opt/project", "/var/www/html"])
def test_allowed(path: str) -> None:
    assert workspace.forbidden_reason(path, RULES) is None


def test_the_refusal_names_where_the_path_came_from(tmp_path: pytest.TempPathFactory) -> None:
    rules = workspace.PathRules(str(tmp_path), (), (), "/nonexistent")
    with pytest.raises(SandboxError) as caught:
        workspace.check_writable(f"{tmp_path}/.ssh", rules, what="allow-write path",
                                 where="$CLAUDE_SANDBOX_ALLOW_WRITE")
    assert caught.value.status == EXIT_CONFIG
    message = caught.value.message
    assert f"{tmp_path}/.ssh" in message and "$CLAUDE_SANDBOX_ALLOW_WRITE" in message


def test_a_symlink_into_a_refused_place_is_refused(tmp_path: pytest.TempPathFactory) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    link = tmp_path / "innocent"
    link.symlink_to(home / ".ssh")
    rules = workspace.PathRules(str(home), (), (), "/nonexistent")
    with pytest.raises(SandboxError) as caught:
        workspace.check_writable(str(link), rules, what="workspace", where="the launch directory")
    assert "resolves to" in caught.value.message


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", "root directory"),
        ("/home", "contains the home directory /home/dev"),
        ("/home/dev", "home directory /home/dev"),
        ("/home/other", "home directory /home/other"),
        ("/home/dev/.ssh", "under /home/dev/.ssh"),
        ("/root/.aws/credentials", "under /root/.aws"),
        ("/home/dev/.local/state/claude-sandbox/claude/home", "under /home/dev/.local"),
    ],
)
def test_allow_read_refuses_homes_their_dot_entries_and_the_store(path: str,
                                                                 expected: str) -> None:
    reason = workspace.readable_refusal(path, RULES)
    assert reason is not None and expected in reason, reason


@pytest.mark.parametrize("path", ["/home/dev/projects/lib", "/srv/data", "/opt/sdk",
                                  "/usr/share/dict", "/tmp/shared"])
def test_allow_read_takes_what_is_no_ones_secret(path: str) -> None:
    assert workspace.readable_refusal(path, RULES) is None


def test_allow_read_refuses_a_store_elsewhere() -> None:
    rules = workspace.PathRules("/home/dev", (), (), "/srv/state/1000")
    for path in ("/srv/state/1000/claude", "/srv/state", "/srv"):
        assert "state store" in str(workspace.readable_refusal(path, rules))
