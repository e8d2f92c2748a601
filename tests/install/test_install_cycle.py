"""install, install again, uninstall, install again: each step checked with testinfra.

All of it happens in a podman container made from the offline base (see
tests/image/podman_base.py), never on the machine, whose install others use.
A vendor `codex` and an administrator's managed settings are planted first,
so the cycle shows that uninstall gives both back.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import podman_base as pb
import pytest

pytestmark = pb.MARKS
testinfra = pytest.importorskip("testinfra")

CONTAINER = f"claude-sandbox-install-test-{os.getpid()}"
INSTALL = "/src/install.sh --agents claude,pi " \
          f"--agent-versions claude={pb.AGENT_VERSIONS['claude']},pi={pb.AGENT_VERSIONS['pi']}"
VENDOR_CODEX = "#!/bin/sh\necho vendor-codex 9.9.9\n"
ADMIN_SETTINGS: dict[str, Any] = {
    "permissions": {"deny": ["Read(./.env)"]},
    "env": {"HTTPS_PROXY": "http://proxy.corp:3128"},
    "hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command",
                                               "command": "/opt/corp/audit"}]}]},
}
LIBEXEC = "/usr/libexec/claude-sandbox"
# Everything but the pseudo file systems and the caches the test itself mounts.
SNAPSHOT = (r"find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp "
            r"-o -path /root/.npm -o -path /root/.cache -o -path /src \) -prune "
            r"-o -printf '%p %m %U %s %T@\n' | sort")


def _changed(before: str, after: str) -> list[str]:
    # The lines that differ, so a failure names the files rather than a hash.
    old, new = set(before.splitlines()), set(after.splitlines())
    return sorted(old ^ new)[:40]


def caches() -> list[str]:
    npm, pip = pb.CACHE_DIR / "npm", pb.CACHE_DIR / "pip"
    npm.mkdir(parents=True, exist_ok=True)
    pip.mkdir(parents=True, exist_ok=True)
    return [f"--volume={npm}:/root/.npm", f"--volume={pip}:/root/.cache/pip"]


@pytest.fixture(scope="module")
def host() -> Iterator[Any]:
    started = time.monotonic()
    base = pb.ensure_base_image()
    name = pb.start(base, CONTAINER, f"--volume={pb.source_snapshot()}:/src:ro", *caches())
    setup = (f"printf '{VENDOR_CODEX}' > /usr/bin/codex && chmod 755 /usr/bin/codex && "
             f"mkdir -p /etc/claude-code && echo '{json.dumps(ADMIN_SETTINGS)}' "
             "> /etc/claude-code/managed-settings.json && install -d -m 1777 /workspace")
    result = pb.execute(name, setup, workdir="/", lock=False)
    assert result.returncode == 0, result
    yield testinfra.get_host(f"podman://{name}")
    pb.stop(name)
    print(f"\ninstall cycle total: {time.monotonic() - started:.0f} s")


def _install(host: Any, args: str = "") -> str:
    result = host.run(f"{INSTALL} {args} 2>&1")
    assert result.rc == 0, result.stdout
    return str(result.stdout)


def _assert_installed(host: Any) -> None:
    for name in ("claude", "codex", "pi", "claude-sandbox"):
        shim = host.file(f"/usr/local/bin/{name}")
        assert shim.user == "root" and shim.mode == 0o755
        assert "claude-sandbox shim" in shim.content_string
    for hook in ("prompt-gate", "session-start"):
        script = host.file(f"{LIBEXEC}/hooks/{hook}")
        assert script.user == "root" and script.mode == 0o755
    loose = host.run(f"find {LIBEXEC} ! -type l \\( ! -user root -o -perm /022 \\)").stdout
    assert loose == ""
    # Byte-compiled: the launch path's package has a .pyc for every module.
    missing = host.run(f"cd {LIBEXEC}/venv/lib/python3*/site-packages/claude_sandbox && "
                       "for f in *.py; do ls __pycache__/${f%.py}.*.pyc >/dev/null 2>&1 "
                       "|| echo $f; done").stdout
    assert missing == ""
    # The launch path's modules in one file (core/bundle.py), root's, read by everyone.
    launch_bundle = host.file(f"{LIBEXEC}/launch-bundle")
    assert launch_bundle.user == "root" and launch_bundle.mode == 0o644
    assert not host.file("/usr/bin/codex").exists
    assert host.file(f"{LIBEXEC}/vendor/codex").content_string == VENDOR_CODEX
    assert host.file(f"{LIBEXEC}/real/codex").linked_to == f"{LIBEXEC}/vendor/codex"
    settings = json.loads(host.file("/etc/claude-code/managed-settings.json").content_string)
    assert settings["permissions"] == ADMIN_SETTINGS["permissions"]
    assert settings["env"] == {**ADMIN_SETTINGS["env"], "DISABLE_AUTOUPDATER": "1",
                               "CLAUDE_CODE_SIMPLE": "0"}
    dropin = json.loads(host.file(
        "/etc/claude-code/managed-settings.d/90-claude-sandbox-unwrapped.json").content_string)
    assert dropin["allowManagedHooksOnly"] is True and dropin["allowedMcpServers"] == []
    gates = [h["command"] for g in settings["hooks"]["UserPromptSubmit"] for h in g["hooks"]]
    assert gates == ["/opt/corp/audit", f"{LIBEXEC}/hooks/prompt-gate"]
    assert "check_for_update_on_startup = false" in host.file(
        "/etc/codex/managed_config.toml").content_string


def test_check_writes_nothing(host: Any) -> None:
    before = host.run(SNAPSHOT).stdout
    result = host.run(f"{INSTALL} --check 2>&1")
    assert result.rc == 0, result.stdout
    assert "  would " in result.stdout and "  changed " not in result.stdout
    changed = _changed(before, host.run(SNAPSHOT).stdout)
    assert not changed, "\n".join(changed)


def test_install(host: Any) -> None:
    started = time.monotonic()
    out = _install(host)
    print(f"\nfirst install: {time.monotonic() - started:.0f} s")
    assert "  changed " in out
    _assert_installed(host)


def test_agents_run_in_the_sandbox(host: Any) -> None:
    for agent, expected in (("claude", pb.AGENT_VERSIONS["claude"]), ("codex", "vendor-codex"),
                            ("pi", pb.AGENT_VERSIONS["pi"])):
        result = pb.execute(CONTAINER, f"{agent} --version 2>&1")
        assert result.returncode == 0 and expected in result.stdout, result


def test_install_again_changes_nothing(host: Any) -> None:
    before = host.run(SNAPSHOT).stdout
    out = _install(host)
    assert out.rstrip().endswith("nothing to change"), out
    assert "  changed" not in out
    _assert_installed(host)
    changed = _changed(before, host.run(SNAPSHOT).stdout)
    assert not changed, "\n".join(changed)


def test_check_after_install_plans_nothing(host: Any) -> None:
    out = _install(host, "--check")
    assert out.rstrip().endswith("nothing to change"), out


def _programs_row(host: Any) -> str:
    report = json.loads(host.run("claude-sandbox doctor --json").stdout)
    row = next(r for r in report["rows"] if r["name"] == "compiled programs")
    return str(row["detail"])


def test_a_program_it_cannot_rebuild_is_removed_not_left_stale(host: Any) -> None:
    """A compiled program whose source changed, on an install that may not fetch the
    compiler (--no-apt): the old binary is removed, never kept running older code, the
    launch takes the Python inner stage, and doctor names what is missing. The next
    install builds it again."""
    enter = f"{LIBEXEC}/enter"
    assert host.run(f"echo changed > {enter}.source-sha256").rc == 0
    assert f"{enter} is older than its source" in _programs_row(host), _programs_row(host)
    out = _install(host, "--no-apt")
    assert f"  changed    removed {enter}, older than its source" in out, out
    assert f"  skipped    {enter}" in out, out
    assert not host.file(enter).exists and not host.file(f"{enter}.source-sha256").exists
    explained = pb.execute(CONTAINER, "claude-sandbox explain 2>&1")
    assert explained.returncode == 0 and "inner stage (_enter)" in explained.stdout, explained
    launched = pb.execute(CONTAINER, "claude-sandbox shell -- echo launched 2>&1")
    assert launched.returncode == 0 and "launched" in launched.stdout, launched
    assert f"{enter} missing" in _programs_row(host), _programs_row(host)
    out = _install(host)
    assert f"built {LIBEXEC}/enter" in out, out
    _assert_installed(host)
    assert host.file(enter).mode == 0o755


def test_uninstall_restores(host: Any) -> None:
    result = host.run("/src/install.sh uninstall 2>&1")
    assert result.rc == 0, result.stdout
    for name in ("claude", "codex", "pi", "claude-sandbox"):
        assert not host.file(f"/usr/local/bin/{name}").exists
    assert not host.file(LIBEXEC).exists
    assert not host.file("/etc/claude-gitconfig").exists
    assert not host.file("/etc/claude-sandbox.conf").exists  # the untouched default goes
    assert not host.file("/etc/codex/managed_config.toml").exists
    codex = host.file("/usr/bin/codex")
    assert codex.content_string == VENDOR_CODEX and codex.mode == 0o755
    assert host.run("codex --version").stdout.strip() == "vendor-codex 9.9.9"
    settings = json.loads(host.file("/etc/claude-code/managed-settings.json").content_string)
    assert settings == ADMIN_SETTINGS
    again = host.run("/src/install.sh uninstall 2>&1")
    assert again.rc == 0 and again.stdout.rstrip().endswith("nothing to change"), again.stdout


def test_install_after_uninstall(host: Any) -> None:
    out = _install(host)
    assert "  changed " in out
    _assert_installed(host)
