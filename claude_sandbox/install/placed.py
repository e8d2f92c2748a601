"""What the installer places under LIBEXEC and on PATH: the shims, the empty files the
sandbox binds, the C programs (the command client, the inner stage), the install hints,
the numbered checks; all root's."""

from __future__ import annotations

import compileall
import dataclasses
import functools
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from claude_sandbox.core import paths
from claude_sandbox.install import hints
from claude_sandbox.install.report import (
    Report,
    differs,
    dpkg_installed,
    read,
    run,
    sync,
    write,
    write_bytes,
)
from claude_sandbox.install.venvs import SOURCE
from claude_sandbox.launch.configure import config, profiles

SHIM_MARK = "# claude-sandbox shim"
# Where the system's programs are: an agent CLI installed before us, a package manager.
SEARCH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# What the shim's interpreter runs (-I -S -c, as paths.internal_argv): no site module
# and no runpy, about 5 ms a launch. The one directory site would add, the core venv's
# site-packages, is named: without site, sys.prefix is the base interpreter's.
SHIM_CODE = (f"import sys; sys.path.append('{paths.CORE_VENV}/lib/python%d.%d/site-packages' "
             "% sys.version_info[:2]); from claude_sandbox.__main__ import main; "
             "sys.exit(main(sys.argv[1:]))")


def shim_text(name: str) -> str:
    """The three-line shim. `bash -p` ignores BASH_ENV, SHELLOPTS and exported functions."""
    target = "" if name == "claude-sandbox" else f"_launch {name} -- "
    return (
        "#!/bin/bash -p\n"
        f"{SHIM_MARK} for `{name}`: root-owned; runs it through the sandbox. Do not edit.\n"
        f'exec {paths.CORE_VENV}/bin/python -I -S -c "{SHIM_CODE}" {target}"$@"\n'
    )


# The numbered checks run inside the sandbox from a read-only copy under LIBEXEC.
VERIFICATION_SOURCE = SOURCE.parent / "verification"
VERIFICATION_DIR = f"{paths.LIBEXEC}/verification"


def install_files(report: Report) -> None:
    for name in profiles.ENTRY_POINTS:
        path = os.path.join(paths.SHIM_DIR, name)
        text = shim_text(name)
        report.step(f"shim {path}", differs(path, text, 0o755),
                    functools.partial(write, path, text, 0o755))
    report.step(f"{paths.CONFIG_FILE} with commented defaults (kept when present)",
                not os.path.exists(paths.CONFIG_FILE),
                lambda: write(paths.CONFIG_FILE, config.DEFAULT_FILE, 0o644))
    # Mount points that bwrap covers inside the read-only root: it cannot create them there.
    for mount_point in (paths.GITCONFIG_INSIDE, paths.INSIDE_MARKER):
        report.step(f"mount point {mount_point}", differs(mount_point, "", 0o644),
                    functools.partial(write, mount_point, "", 0o644))
    report.step(f"empty file {paths.EMPTY_FILE}", differs(paths.EMPTY_FILE, "", 0o444),
                lambda: write(paths.EMPTY_FILE, "", 0o444))
    for directory in (paths.EMPTY_DIR, paths.VIEWS_DIR):
        report.step(f"empty directory {directory}", not _empty_dir_ok(directory),
                    functools.partial(_make_empty_dir, directory))


# The programs built here from source, C and static: the command client of hardening =
# brokered (docs/adr/0009-the-enforced-process-tree.md), the inner stage of hardening =
# standard (docs/adr/0017-the-inner-stage-in-c.md), the root-only walk's reader of
# directory times (docs/adr/0019-the-directory-times-in-c.md) and the tie that starts
# pasta and the relays without a fork (docs/adr/0004-launch-cost.md). A compiler the
# installer fetched for them is removed again.
BUILD_PACKAGES = ("gcc", "libc6-dev")
COMMON_FLAGS = ("-static", "-O2", "-Wall", "-Wextra", "-Werror")


@dataclasses.dataclass(frozen=True)
class Built:
    """One program built from one C file: where it goes, and what a missing one costs."""

    source: Path
    target: str
    flags: tuple[str, ...]
    without: str  # said when it cannot be built

    @property
    def stamp(self) -> str:
        return f"{self.target}.source-sha256"

    def digest(self, package: Path = SOURCE) -> str:
        """The digest of the source in `package` (by default the one installing) and the
        flags: what the stamp of a binary built from it holds."""
        source = package / self.source.relative_to(SOURCE)
        return hashlib.sha256(source.read_bytes() + " ".join(self.flags).encode()
                              ).hexdigest()


PROGRAMS = (
    Built(SOURCE / "inside" / "command-client.c", paths.COMMAND_CLIENT,
          (*COMMON_FLAGS, f'-DBROKER_SOCKET="{paths.BROKER_SOCKET}"'),  # one path, paths.py's
          "hardening = brokered refuses to launch without it"),
    Built(SOURCE / "inside" / "enter.c", paths.ENTER_STAGE, COMMON_FLAGS,
          "launches run the Python inner stage instead, about 17 ms slower"),
    Built(SOURCE / "launch" / "facts" / "dirtimes.c", paths.DIR_TIMES,
          (*COMMON_FLAGS, "-pthread"),
          "root launches read the walk's directory times in Python instead, slower"),
    Built(SOURCE / "jail" / "tie.c", paths.TIE, COMMON_FLAGS,
          "pasta and the outside relays start from a fork of the launcher instead, "
          "about 1.5 ms slower"),
)


def _stale(program: Built) -> bool:
    return not (os.path.exists(program.target)
                and (read(program.stamp) or "") == program.digest())


def remove_stale_programs(report: Report) -> None:
    """Before the new package is installed: each compiled program older than its source,
    removed. Not left as it was: it may refuse every record the new launcher writes, or
    lack a fix its source has, and an install stopped before the programs are built
    again (a failed pip, no compiler) would leave it running. Without it the launch takes
    the way `without` names, and doctor says so."""
    for program in PROGRAMS:
        if _stale(program) and (os.path.lexists(program.target)
                                or os.path.lexists(program.stamp)):
            report.step(f"removed {program.target}, older than its source", True,
                        functools.partial(_remove, program))


def install_programs(report: Report, apt: bool) -> None:
    report.step(f"broker directory {paths.BROKER_DIR}", not _empty_dir_ok(paths.BROKER_DIR),
                functools.partial(_make_empty_dir, paths.BROKER_DIR))
    # Each source's digest, kept beside its binary: an install that finds them unchanged
    # builds nothing, and so fetches no compiler (a second install changes nothing).
    stale = [p for p in PROGRAMS if _stale(p)]
    fetched = [pkg for pkg in BUILD_PACKAGES if not dpkg_installed(pkg)] if stale else []
    if fetched and not apt:
        for program in stale:
            print(f"  skipped    {program.target} (needs {' '.join(fetched)}; "
                  f"{program.without})")
        return
    if not stale:
        for program in PROGRAMS:
            report.step(f"built {program.target}", False, lambda: None)
        return

    def build() -> None:
        # Nothing stale is left running meanwhile: remove_stale_programs, the install's
        # first step, took every one away.
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        before = _installed_packages() if fetched else set()
        if fetched:
            run(["apt-get", "update", "-qq"], env=env)
            run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *fetched],
                 env=env)
        try:
            with tempfile.TemporaryDirectory() as scratch:
                for program in stale:
                    built = os.path.join(scratch, os.path.basename(program.target))
                    run(["gcc", *program.flags, "-o", built, str(program.source)])
                    with open(built, "rb") as handle:
                        write_bytes(program.target, handle.read(), 0o755)
                    write(program.stamp, program.digest(), 0o644)
        finally:
            # Exactly what the install above added, the compiler's dependencies too.
            added = sorted(_installed_packages() - before) if fetched else []
            if added:
                run(["apt-get", "purge", "-y", "-qq", *added], env=env)

    report.step("built " + ", ".join(p.target for p in stale), True, build)


def _remove(program: Built) -> None:
    for path in (program.target, program.stamp):
        if os.path.lexists(path):
            os.unlink(path)


def _installed_packages() -> set[str]:
    result = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\\n"], capture_output=True,
                            text=True, check=False)
    return set(result.stdout.split())


def _empty_dir_ok(path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == 0
            and stat.S_IMODE(info.st_mode) == 0o555 and not os.listdir(path))


def _make_empty_dir(path: str) -> None:
    if os.path.lexists(path) and not os.path.isdir(path):
        os.unlink(path)
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        shutil.rmtree(os.path.join(path, name), ignore_errors=True)
    os.chown(path, 0, 0)
    os.chmod(path, 0o555)


def install_hints(report: Report) -> None:
    """The scripts that put a hint before an install outside the workspace (hints.py), for
    each package manager the system has now; a name it no longer has loses its script."""
    wanted = {name: text for name, text in hints.wanted().items()
              if paths.which(name, SEARCH_DIRS) is not None}
    target = Path(hints.HINTS_DIR)
    present = [p.name for p in target.iterdir()] if target.is_dir() else []
    sync(report, f"install hints in {hints.HINTS_DIR} ({', '.join(sorted(wanted)) or 'none'})",
         target, wanted, present, 0o755)


def install_verification(report: Report) -> None:
    if not VERIFICATION_SOURCE.is_dir():
        print(f"  skipped    {VERIFICATION_DIR} (no verification/ beside the package)")
        return
    wanted = {
        str(p.relative_to(VERIFICATION_SOURCE)): p.read_text()
        for p in sorted(VERIFICATION_SOURCE.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts
    }
    target = Path(VERIFICATION_DIR)
    present = {str(p.relative_to(target)) for p in target.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts} if target.exists() else set()
    # Byte-compiled once written, as root: inside the sandbox the tree is read-only.
    sync(report, f"verification checks in {VERIFICATION_DIR}", target, wanted, present, 0o644,
         lambda: compileall.compile_dir(str(target), quiet=1))


def harden_tree(report: Report, root: str) -> None:
    """Root-owned and not group/world-writable, all the way down."""
    loose = []
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            if not os.path.islink(path) and (info.st_uid != 0 or info.st_mode & 0o022):
                loose.append(path)
    def action() -> None:
        for path in loose:
            info = os.lstat(path)
            os.chown(path, 0, 0)
            os.chmod(path, info.st_mode & ~0o022 & 0o7777)
    report.step(f"ownership and modes under {root} ({len(loose)} loose)", bool(loose), action)
