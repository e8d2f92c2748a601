"""Install, check and uninstall claude-sandbox on a Debian/Ubuntu host, as root.

Standard library only: it runs before any venv exists. Every step compares
what is there with what should be and says `changed` or `unchanged`, so a
second run changes nothing and says so. `--check` prints the plan and writes
nothing. Everything placed is root-owned and not group/world-writable.
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from claude_sandbox import __version__
from claude_sandbox.core import paths
from claude_sandbox.install.agents import (
    NPM_PACKAGES,
    VENDOR_DIR,
    is_shim,
    link_real,
    move_vendor,
    npm_install,
    read_vendor_record,
)
from claude_sandbox.install.bundle import install_bundle
from claude_sandbox.install.placed import (
    harden_tree,
    install_files,
    install_hints,
    install_programs,
    install_verification,
    remove_stale_programs,
)
from claude_sandbox.install.report import (
    InstallError,
    Report,
    dpkg_installed,
    read,
    run,
)
from claude_sandbox.install.settings import (
    install_integrity,
    uninstall_integrity,
)
from claude_sandbox.install.venvs import (
    install_package,
    install_tools,
    make_venv,
    package_dir,
)
from claude_sandbox.launch.configure import config, profiles

APT_PACKAGES = (
    "bubblewrap", "passt", "util-linux", "iptables", "socat", "git",
    "python3", "python3-venv", "ca-certificates",
    "openssl",  # the credential broker's certificates (launch/session/tlsca.py)
)


# What the jail's holder does first (core/views.py own_namespaces), by the interpreter the
# core venv runs: where AppArmor restricts user namespaces, a profile decides by that
# program, not by another's. Written out, not imported, so that an unprivileged user
# runs it without reading the installer's checkout.
USERNS_PROBE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.getuid(), os.getgid()  # before: inside, unmapped, they read as 65534
if libc.unshare(0x10000000 | 0x00020000 | 0x40000000) != 0:  # user, mount, network
    sys.exit("unshare: " + os.strerror(ctypes.get_errno()))
maps = (("uid_map", f"0 {uid} 1"), ("setgroups", "deny"), ("gid_map", f"0 {gid} 1"))
for name, text in maps:
    try:
        with open("/proc/self/" + name, "w") as handle:
            handle.write(text)
    except OSError as error:
        sys.exit(f"cannot write the user namespace's {name}: {error.strerror}")
"""


def userns_problem() -> str | None:
    """Why user namespaces do not work here (for us, then for an unprivileged user), or None."""
    probe = [sys.executable, "-I", "-S", "-c", USERNS_PROBE]
    attempts = [("", probe)]
    setpriv = paths.find_tool("setpriv")
    if os.getuid() == 0 and setpriv:
        unprivileged = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *probe]
        attempts.append((" for unprivileged users", unprivileged))
    for who, argv in attempts:
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode == 0:
            continue
        lines = result.stderr.strip().splitlines()
        detail = lines[-1] if lines else "no reason given"
        hints = []
        for sysctl, bad in (
            ("/proc/sys/user/max_user_namespaces", "0"),
            ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
        ):
            try:
                if Path(sysctl).read_text().strip() == bad:
                    hints.append(f"{sysctl[10:].replace('/', '.')} is {bad}")
            except OSError:
                pass
        hint = "; ".join(hints) or "the container runtime may block them (seccomp or no userns)"
        return f"user namespaces do not work{who} ({detail}; {hint})"
    return None


def apt_install(report: Report) -> None:
    missing = [pkg for pkg in APT_PACKAGES if not dpkg_installed(pkg)]
    def action() -> None:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "update", "-qq"], env=env)
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)
    report.step(f"system packages ({' '.join(missing) or 'all present'})", bool(missing), action)


def _versions(spec: str) -> dict[str, str]:
    pairs = (pair.partition("=") for pair in spec.split(",") if pair)
    return {name: "" if version == "latest" else version.strip() for name, _, version in pairs}


def install(options: argparse.Namespace) -> int:
    report = Report(check=options.check)
    print(f"claude-sandbox {__version__}: {'plan' if options.check else 'install'}")
    if os.getuid() != 0:
        raise InstallError("run the installer as root")
    if not options.no_apt:
        apt_install(report)
    # An image build runs in the builder's sandbox, not where the image will run:
    # there the probe says nothing about the host, and doctor checks it at run time.
    probe = not options.no_host_check
    problem = userns_problem() if probe else None
    if problem:
        raise InstallError(f"refusing to install: {problem}")
    remove_stale_programs(report)  # before the package they would be older than
    make_venv(report, paths.CORE_VENV, with_pip=False)
    install_package(report, paths.CORE_VENV, include_tools=False)
    install_bundle(report, package_dir(paths.CORE_VENV))  # after the package: its sources
    if not options.no_tools:
        install_tools(report)
    install_files(report)
    install_programs(report, apt=not options.no_apt)
    install_verification(report)
    install_hints(report)
    install_integrity(report)
    agents = [a for a in options.agents.split(",") if a] if options.agents else []
    for name in profiles.AGENT_NAMES:
        move_vendor(report, name)
    if agents:
        npm_install(report, agents, _versions(options.agent_versions))
    for name in profiles.AGENT_NAMES:
        link_real(report, name)
    harden_tree(report, paths.LIBEXEC) if os.path.isdir(paths.LIBEXEC) else None
    verb = "would change" if report.check else "changed"
    print(f"{report.changed} step(s) {verb}" if report.changed else "nothing to change")
    return 0


def uninstall(options: argparse.Namespace) -> int:
    report = Report(check=options.check)
    if os.getuid() != 0:
        raise InstallError("run the installer as root")
    # Every record is read before anything is removed: a damaged one stops here.
    records = {name: read_vendor_record(record) for name in profiles.AGENT_NAMES
               if os.path.exists(record := os.path.join(VENDOR_DIR, f"{name}.json"))}
    for name in profiles.ENTRY_POINTS:
        path = os.path.join(paths.SHIM_DIR, name)
        report.step(f"remove shim {path}", is_shim(path), functools.partial(os.unlink, path))
    for name, data in records.items():
        def restore(data: dict[str, str] = data) -> None:
            if data["link"]:
                os.symlink(data["link"], data["path"])
            else:
                shutil.move(data["target"], data["path"])
        # Our shim there is removed just above (or would be, with --check); anything
        # else there means the vendor binary is already back: an uninstall that
        # stopped part-way and runs again.
        place = data["path"]
        report.step(f"restore the vendor {name} at {place}",
                    not os.path.lexists(place) or is_shim(place), restore)
    uninstall_integrity(report)
    for mount_point in (paths.GITCONFIG_INSIDE,):
        report.step(f"remove {mount_point}", os.path.exists(mount_point),
                    functools.partial(os.unlink, mount_point))
    report.step(f"remove {paths.LIBEXEC}", os.path.isdir(paths.LIBEXEC),
                lambda: shutil.rmtree(paths.LIBEXEC))
    if read(paths.CONFIG_FILE) == config.DEFAULT_FILE:
        report.step(f"remove {paths.CONFIG_FILE} (the untouched default)", True,
                    lambda: os.unlink(paths.CONFIG_FILE))
    elif os.path.exists(paths.CONFIG_FILE):
        print(f"  kept       {paths.CONFIG_FILE} (edited by the operator; remove it by hand)")
    print(f"{report.changed} step(s) changed" if report.changed else "nothing to change")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="install.sh",
        description="Install claude-sandbox on this Debian/Ubuntu host (as root). "
                    "Running it again changes nothing and says so.",
    )
    parser.add_argument("command", nargs="?", default="install", choices=("install", "uninstall"))
    parser.add_argument("--check", action="store_true", help="print the plan; write nothing")
    parser.add_argument("--agents", metavar="LIST", default="",
                        help="also install these agent CLIs from the npm registry "
                             "(comma-separated: claude,codex,pi)")
    parser.add_argument("--agent-versions", metavar="LIST", default="",
                        help="pin npm versions for --agents (comma-separated NAME=VERSION, "
                             "e.g. claude=2.1.197,codex=0.171.0; default: latest)")
    parser.add_argument("--no-host-check", action="store_true",
                        help="skip the user-namespace probe (for image builds, which do not "
                             "run where the image will)")
    parser.add_argument("--no-apt", action="store_true", help="do not install system packages")
    parser.add_argument("--no-tools", action="store_true",
                        help="skip the operator tools venv (doctor, verify)")
    options = parser.parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        # Steps interleave with apt/pip/npm output; unbuffered lines keep build logs in order.
        sys.stdout.reconfigure(line_buffering=True)
    for agent in filter(None, options.agents.split(",")):
        if agent not in NPM_PACKAGES:
            parser.error(f"unknown agent {agent!r} in --agents")
    for pair in filter(None, options.agent_versions.split(",")):
        name, equals, version = pair.partition("=")
        if not equals or name not in NPM_PACKAGES or not version.strip():
            parser.error(f"bad --agent-versions entry {pair!r} (want NAME=VERSION)")
    try:
        return install(options) if options.command == "install" else uninstall(options)
    except InstallError as error:
        print(f"claude-sandbox install: {error}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as error:
        print(f"claude-sandbox install: {' '.join(map(str, error.cmd))} failed "
              f"(exit {error.returncode})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
