"""The agents' npm packages, and which program each agent's shim runs (LIBEXEC/real/NAME);
an agent CLI installed before us is moved aside, and given back on uninstall."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from claude_sandbox.core import paths
from claude_sandbox.install.placed import SEARCH_DIRS, SHIM_MARK
from claude_sandbox.install.report import (
    InstallError,
    Report,
    run,
    write,
)

NPM_PACKAGES = {
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "pi": "@mariozechner/pi-coding-agent",
}
VENDOR_DIR = f"{paths.LIBEXEC}/vendor"


def is_shim(path: str) -> bool:
    try:
        with open(path, errors="replace") as handle:
            return SHIM_MARK in handle.read(512)
    except OSError:
        return False


def vendor_binaries(name: str) -> list[str]:
    """Every `name` on the standard PATH that is not our shim."""
    found = []
    for directory in SEARCH_DIRS:
        path = os.path.join(directory, name)
        if os.path.lexists(path) and not is_shim(path) and os.path.realpath(path) not in found:
            found.append(path)
    return found


def move_vendor(report: Report, name: str) -> None:
    for path in vendor_binaries(name):
        target = os.path.realpath(path)
        record = os.path.join(VENDOR_DIR, f"{name}.json")

        def action(path: str = path, target: str = target, record: str = record) -> None:
            os.makedirs(VENDOR_DIR, mode=0o755, exist_ok=True)
            kept = os.path.join(VENDOR_DIR, name)
            if os.path.islink(path):
                link = os.readlink(path)
                os.unlink(path)
            else:
                shutil.move(path, kept)
                link, target = "", kept
            write(record, json.dumps({"path": path, "link": link, "target": target}) + "\n",
                   0o644)
            _point_real(name, target)
        report.step(f"move the vendor {name} at {path} off PATH (kept as {target})", True, action)


def read_vendor_record(record: str) -> dict[str, str]:
    """The record `move_vendor` wrote; a damaged one stops the uninstall with its path
    rather than restoring a vendor binary to a place we cannot vouch for."""
    try:
        data = json.loads(Path(record).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise InstallError(f"{record}: cannot read the vendor record: {exc}") from None
    keys = ("path", "link", "target")
    if not (isinstance(data, dict) and all(isinstance(data.get(k), str) for k in keys)
            and os.path.isabs(data["path"])):
        raise InstallError(f"{record}: not a vendor record (want an absolute path, "
                           "a link and a target); fix or remove it and run uninstall again")
    return {key: data[key] for key in keys}


def _point_real(name: str, target: str) -> None:
    os.makedirs(paths.REAL_BIN_DIR, mode=0o755, exist_ok=True)
    link = os.path.join(paths.REAL_BIN_DIR, name)
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(target, link)


def _installed_version(name: str) -> str | None:
    manifest = Path(paths.AGENTS_PREFIX, "lib", "node_modules", NPM_PACKAGES[name], "package.json")
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return version if isinstance(version, str) else None


def npm_install(report: Report, names: Sequence[str],
                versions: Mapping[str, str] | None = None) -> None:
    """Install the agents' npm packages; a pinned version that differs is reinstalled."""
    versions = versions or {}
    bin_dir = os.path.join(paths.AGENTS_PREFIX, "bin")
    missing = [n for n in names if not os.path.exists(os.path.join(bin_dir, n))
               or (versions.get(n) not in (None, "", "latest")
                   and _installed_version(n) != versions[n])]
    npm = paths.which("npm", ("/usr/local/bin", "/usr/bin", "/bin"))

    def spec(name: str) -> str:
        version = versions.get(name, "")
        return f"{NPM_PACKAGES[name]}@{version}" if version else NPM_PACKAGES[name]

    def action() -> None:
        if npm is None:
            raise InstallError("npm is not installed; install Node.js >= 20 first")
        run([npm, "install", "-g", "--no-fund", "--no-audit", "--prefix", paths.AGENTS_PREFIX,
              *(spec(n) for n in missing)])
    report.step(f"agent CLIs from the npm registry ({' '.join(map(spec, missing)) or 'present'})",
                bool(missing), action)


def link_real(report: Report, name: str) -> None:
    """Point LIBEXEC/real/NAME at the agent's real program, when we know one."""
    link = os.path.join(paths.REAL_BIN_DIR, name)
    ours = os.path.join(paths.AGENTS_PREFIX, "bin", name)
    current = os.path.realpath(link) if os.path.lexists(link) else None
    if current and os.path.exists(current):
        print(f"  unchanged  {link} -> {current}")
        return
    if os.path.exists(ours) or report.check:
        target = os.path.realpath(ours)
        report.step(f"{link} -> {target}", True, lambda: _point_real(name, target))
