"""doctor's rows about the installation itself: the shims, the core venv's purity, what
shadows the shims on PATH, the configuration, the C programs, the launch bundle, each
agent's program, and the sizes on disk (the host's rows are in doctor.py)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from claude_sandbox.core import bundle, paths
from claude_sandbox.core.errors import SandboxError
from claude_sandbox.install import bundle as bundled
from claude_sandbox.install import placed, venvs
from claude_sandbox.install.report import read
from claude_sandbox.launch.configure import config, profiles
from claude_sandbox.launch.facts import hostfacts
from claude_sandbox.launch.session import state
from claude_sandbox.tools.finding import Finding


def shims_row() -> Finding:
    bad = []
    for name in profiles.ENTRY_POINTS:
        path = os.path.join(paths.SHIM_DIR, name)
        try:
            info = os.lstat(path)
            text = Path(path).read_text()
        except OSError:
            bad.append(f"{path} missing")
            continue
        if text != placed.shim_text(name):
            bad.append(f"{path} differs from the shim")
        elif info.st_uid != 0 or stat.S_IMODE(info.st_mode) != 0o755 or stat.S_ISLNK(info.st_mode):
            bad.append(f"{path} is not a root-owned 0755 file")
    if bad:
        return Finding(False, "; ".join(bad), "re-run the installer (./install.sh) as root")
    return Finding(True, f"{len(profiles.ENTRY_POINTS)} shims match placed.shim_text")


def venv_row() -> Finding:
    sites = list(Path(paths.CORE_VENV).glob("lib/python3*/site-packages"))
    if len(sites) != 1:
        return Finding(False, f"no single site-packages in {paths.CORE_VENV}",
                       "re-run the installer as root")
    site = sites[0]
    dists = sorted(p.name for p in site.iterdir() if p.name.endswith((".dist-info", ".egg-info")))
    problems = []
    if len(dists) != 1 or not dists[0].startswith("claude_sandbox-"):
        problems.append(f"distributions: {', '.join(dists) or 'none'}")
    problems += [f"{p} runs code at start" for p in site.rglob("*.pth")]
    for path in [Path(paths.CORE_VENV), *Path(paths.CORE_VENV).rglob("*")]:
        if path.is_symlink():
            continue
        info = path.lstat()
        if info.st_uid != 0 or info.st_mode & 0o022:
            problems.append(f"{path} is not root-owned or is group/world-writable")
            break
    if problems:
        return Finding(False, "; ".join(problems[:3]),
                       f"rm -rf {paths.CORE_VENV} and re-run the installer as root")
    return Finding(True, f"{dists[0]} only, no .pth, root-owned")


def guard_row() -> Finding:
    entries = hostfacts.guard_entries(p for p in os.environ.get("PATH", "").split(":") if p)
    others = [f"{e.directory}/{e.name}" for e in entries if e.state == "other"]
    if others:
        return Finding(False, f"ahead of {paths.SHIM_DIR} on PATH: {', '.join(others)}",
                       f"remove them, or put {paths.SHIM_DIR} first on PATH")
    dirs = sorted({e.directory for e in entries})
    return Finding(True, f"nothing shadows the shims ({len(dirs)} directories ahead checked)")


def config_row() -> Finding:
    try:
        cfg = config.load("claude", os.environ)
    except SandboxError as error:
        return Finding(False, error.message, f"fix the line named in {paths.CONFIG_FILE}")
    jail = "on" if cfg.egress_jail else "OFF"
    return Finding(True, f"{paths.CONFIG_FILE} parses (egress jail {jail})")


def programs_row() -> Finding:
    """The programs the installer builds from C (placed.PROGRAMS): the command client of
    brokered, the inner stage of standard, and a root launch's reader of directory times.
    One missing is said with what it costs: brokered refuses to launch, standard runs the
    Python stage (ADR 0017), a root launch reads the times in Python (ADR 0019)."""
    bad, missing = [], []
    for program in placed.PROGRAMS:
        try:
            info = os.lstat(program.target)
        except OSError:
            missing.append(f"{program.target} missing: {program.without}")
            continue
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != 0
                or stat.S_IMODE(info.st_mode) != 0o755):
            bad.append(f"{program.target} is not a root-owned 0755 file")
        elif (digest := _digest(program)) is None:
            bad.append(f"{program.target}: its source is not in the core venv, so whether "
                       "it is current cannot be told")
        elif read(program.stamp) != digest:
            # The launch path's package changed without the installer building again:
            # the binary may refuse what the launcher now writes (exit 64), or lack a fix
            # its source has.
            bad.append(f"{program.target} is older than its source")
    if bad:
        return Finding(False, "; ".join(bad), "re-run the installer (./install.sh) as root")
    if missing:
        return Finding(False, "; ".join(missing),
                       "re-run ./install.sh as root where it may install gcc (no --no-apt)")
    return Finding(True, ", ".join(p.target for p in placed.PROGRAMS))


def _digest(program: placed.Built) -> str | None:
    """The digest of the source in the core venv, whose launcher writes what the program
    reads (this tools venv's copy may be older or newer); None where it is missing."""
    try:
        return program.digest(venvs.package_dir(paths.CORE_VENV))
    except OSError:
        return None


def bundle_row() -> Finding:
    """The launch bundle (ADR 0018): one the launch would refuse (not root's, writable by
    others, a link) or that no longer matches the core venv's package costs time only,
    since every module it does not serve is imported from the venv; said with the fix."""
    try:
        info = os.lstat(bundle.BUNDLE)
    except OSError:
        return Finding(False, f"{bundle.BUNDLE} missing: the launch imports its modules one "
                              "by one from the venv, slower", "re-run ./install.sh as root")
    if (not stat.S_ISREG(info.st_mode) or info.st_uid != 0
            or stat.S_IMODE(info.st_mode) & 0o022):
        return Finding(False, f"{bundle.BUNDLE} is not a root-owned file only root may "
                              "write: the launch does not read it",
                       "re-run ./install.sh as root")
    if not bundled.current(bundle.BUNDLE, venvs.package_dir(paths.CORE_VENV)):
        return Finding(False, f"{bundle.BUNDLE} does not match the core venv's package: the "
                              "launch imports what changed from the venv, slower",
                       "re-run ./install.sh as root")
    return Finding(True, f"{bundle.BUNDLE} matches the core venv's package")


def agent_row(name: str) -> Callable[[], Finding]:
    def probe() -> Finding:
        try:
            binary = hostfacts.real_binary(name)
        except SandboxError as error:
            return Finding(False, error.message,
                           f"./install.sh --agents {name} (or point {paths.REAL_BIN_DIR}/{name} "
                           "at it)")
        return Finding(True, binary)
    return probe


def _size(top: str) -> int:
    """The bytes of the regular files below `top`, links not followed."""
    total = 0
    for directory, _dirs, files in os.walk(top):
        for name in files:
            try:
                info = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def sizes_row() -> Finding:
    """What the installation and this user's state store take on disk."""
    try:
        cfg = config.load("claude", os.environ)
    except SandboxError:
        cfg = None
    store = state.store_root(cfg.state_dir if cfg else None, hostfacts.login_home(),
                             os.getuid())
    found = [f"{paths.LIBEXEC} {_size(paths.LIBEXEC) >> 20} MiB"]
    for name in profiles.AGENT_NAMES:
        home = state.agent_home(store, name)
        if os.path.isdir(home):
            found.append(f"{name}'s store {_size(home) >> 20} MiB")
    return Finding(True, "; ".join(found))
