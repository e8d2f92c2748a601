"""Install, check and uninstall claude-sandbox on a Debian/Ubuntu host, as root.

Standard library only: it runs before any venv exists. Every step compares
what is there with what should be and says `changed` or `unchanged`, so a
second run changes nothing and says so. `--check` prints the plan and writes
nothing. Everything placed is root-owned and not group/world-writable.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import functools
import hashlib
import io
import json
import os
import py_compile
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from claude_sandbox import __version__
from claude_sandbox.core import paths
from claude_sandbox.install import hints, integrity
from claude_sandbox.launch import config, profiles

SOURCE = Path(__file__).resolve().parents[1]  # the package: claude_sandbox/
# The numbered checks run inside the sandbox from a read-only copy under LIBEXEC.
VERIFICATION_SOURCE = SOURCE.parent / "verification"
VERIFICATION_DIR = f"{paths.LIBEXEC}/verification"
APT_PACKAGES = (
    "bubblewrap", "passt", "util-linux", "iproute2", "iptables", "socat", "git",
    "python3", "python3-venv", "ca-certificates",
    "openssl",  # the credential broker's certificates (launch/tlsca.py)
)
NPM_PACKAGES = {
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "pi": "@mariozechner/pi-coding-agent",
}
TOOLS_REQUIREMENTS = ("rich", "pytest", "pytest-testinfra", "pyroute2", "jinja2", "pyyaml")
SYSTEM_PYTHON = "/usr/bin/python3"
VENDOR_DIR = f"{paths.LIBEXEC}/vendor"
STATE_FILE = f"{paths.LIBEXEC}/installed.json"
SHIM_MARK = "# claude-sandbox shim"
# Where an agent CLI installed before us may be found on PATH.
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


class InstallError(Exception):
    pass


@dataclass
class Report:
    check: bool
    changed: int = 0

    def step(self, what: str, needed: bool, action: Callable[[], None]) -> None:
        if not needed:
            print(f"  unchanged  {what}")
            return
        self.changed += 1
        if self.check:
            print(f"  would      {what}")
            return
        action()
        print(f"  changed    {what}")


def _run(argv: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=True, text=True, **kwargs)  # type: ignore[call-overload,no-any-return]


def _write(path: str, text: str, mode: int) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".claude-sandbox.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(temporary, mode)
    os.chown(temporary, 0, 0)
    os.replace(temporary, path)


def _differs(path: str, text: str, mode: int) -> bool:
    try:
        with open(path) as handle:
            same = handle.read() == text
        info = os.lstat(path)
    except OSError:
        return True
    return not same or (info.st_mode & 0o7777) != mode or info.st_uid != 0


# ---------------------------------------------------------------- preconditions

def userns_problem() -> str | None:
    """Why user namespaces do not work here (for us, then for an unprivileged user), or None."""
    unshare = paths.find_tool("unshare")
    if unshare is None:
        return "unshare is missing (install util-linux)"
    probe = [unshare, "--user", "--map-root-user", "--net", "true"]
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
    missing = [pkg for pkg in APT_PACKAGES if not _dpkg_installed(pkg)]
    def action() -> None:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        _run(["apt-get", "update", "-qq"], env=env)
        _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)
    report.step(f"system packages ({' '.join(missing) or 'all present'})", bool(missing), action)


def _dpkg_installed(package: str) -> bool:
    if paths.which("dpkg-query", paths.SYSTEM_DIRS) is None:
        return True
    result = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", package],
                            capture_output=True, text=True, check=False)
    return result.stdout.endswith("installed") and "not-installed" not in result.stdout


# ---------------------------------------------------------------- the core venv

def _package_files(include_tools: bool) -> Iterator[tuple[Path, Path]]:
    for source in sorted(SOURCE.rglob("*")):
        relative = source.relative_to(SOURCE)
        if "__pycache__" in relative.parts or source.is_dir():
            continue
        if not include_tools and relative.parts[0] == "tools":
            continue
        if source.suffix not in (".py", ".typed"):
            continue
        yield source, Path("claude_sandbox") / relative


def _site_packages(venv: str) -> Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = Path(venv) / "bin" / "python"
    if python.exists():
        out = subprocess.run([str(python), "-I", "-c",
                              "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
        return Path(out)
    return Path(venv) / "lib" / version / "site-packages"


def _dist_info(files: list[Path]) -> dict[str, str]:
    """A minimal dist-info: the venv then holds exactly one distribution, ours."""
    name = f"claude_sandbox-{__version__}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: claude-sandbox\nVersion: {__version__}\n"
    record = [f"{path},," for path in (*map(str, files), f"{name}/METADATA",
                                        f"{name}/INSTALLER", f"{name}/RECORD")]
    return {
        f"{name}/METADATA": metadata,
        f"{name}/INSTALLER": "claude-sandbox-installer\n",
        f"{name}/RECORD": "\n".join(record) + "\n",
    }


def install_package(report: Report, venv: str, *, include_tools: bool) -> None:
    site = _site_packages(venv)
    pairs = list(_package_files(include_tools))
    wanted = {str(dest): src.read_text() for src, dest in pairs}
    wanted.update(_dist_info([dest for _, dest in pairs]))
    present = {
        str(p.relative_to(site))
        for p in site.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
        and p.relative_to(site).parts[0].startswith("claude_sandbox")
    } if site.exists() else set()
    stale = present - set(wanted)
    differ = [rel for rel, text in wanted.items() if _differs(str(site / rel), text, 0o644)]

    def action() -> None:
        for rel in stale:
            (site / rel).unlink()
        for rel in differ:
            _write(str(site / rel), wanted[rel], 0o644)
        compileall.compile_dir(str(site / "claude_sandbox"), quiet=1,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    report.step(f"claude_sandbox {__version__} in {venv}", bool(stale or differ), action)


def make_venv(report: Report, venv: str, *, with_pip: bool) -> None:
    python = Path(venv) / "bin" / "python"
    def action() -> None:
        args = [SYSTEM_PYTHON, "-m", "venv"]
        if not with_pip:
            args.append("--without-pip")
        _run([*args, venv])
    report.step(f"venv {venv}", not python.exists(), action)


def _pip_install(pip: str) -> None:
    _run([pip, "install", "-q", *TOOLS_REQUIREMENTS])


def install_tools(report: Report) -> None:
    make_venv(report, paths.TOOLS_VENV, with_pip=True)
    pip = Path(paths.TOOLS_VENV) / "bin" / "pip"
    have = set()
    if pip.exists():
        out = subprocess.run([str(pip), "list", "--format=json"], capture_output=True,
                             text=True, check=False).stdout or "[]"
        have = {entry["name"].lower() for entry in json.loads(out)}
    missing = [req for req in TOOLS_REQUIREMENTS if req.lower() not in have]
    report.step(f"operator tools ({' '.join(missing) or 'all present'})", bool(missing),
                functools.partial(_pip_install, str(pip)))
    install_package(report, paths.TOOLS_VENV, include_tools=True)


# ---------------------------------------------------------------- agents

def _is_shim(path: str) -> bool:
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
        if os.path.lexists(path) and not _is_shim(path) and os.path.realpath(path) not in found:
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
            _write(record, json.dumps({"path": path, "link": link, "target": target}) + "\n",
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
        _run([npm, "install", "-g", "--no-fund", "--no-audit", "--prefix", paths.AGENTS_PREFIX,
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


# ---------------------------------------------------------------- files

def install_files(report: Report) -> None:
    for name in profiles.ENTRY_POINTS:
        path = os.path.join(paths.SHIM_DIR, name)
        text = shim_text(name)
        report.step(f"shim {path}", _differs(path, text, 0o755),
                    functools.partial(_write, path, text, 0o755))
    report.step(f"{paths.CONFIG_FILE} with commented defaults (kept when present)",
                not os.path.exists(paths.CONFIG_FILE),
                lambda: _write(paths.CONFIG_FILE, config.DEFAULT_FILE, 0o644))
    # Mount points that bwrap covers inside the read-only root: it cannot create them there.
    for mount_point in (paths.GITCONFIG_INSIDE, paths.INSIDE_MARKER):
        report.step(f"mount point {mount_point}", _differs(mount_point, "", 0o644),
                    functools.partial(_write, mount_point, "", 0o644))
    report.step(f"empty file {paths.EMPTY_FILE}", _differs(paths.EMPTY_FILE, "", 0o444),
                lambda: _write(paths.EMPTY_FILE, "", 0o444))
    report.step(f"empty directory {paths.EMPTY_DIR}", not _empty_dir_ok(paths.EMPTY_DIR),
                functools.partial(_make_empty_dir, paths.EMPTY_DIR))


# The command client of hardening = brokered: C, static, built here from source
# (docs/adr/0009-the-enforced-process-tree.md). A compiler the installer fetched for it
# is removed again.
CLIENT_SOURCE = SOURCE / "inside" / "command-client.c"
BUILD_PACKAGES = ("gcc", "libc6-dev")
CLIENT_FLAGS = ("-static", "-O2", "-Wall", "-Wextra", "-Werror",
                f'-DBROKER_SOCKET="{paths.BROKER_SOCKET}"')  # one path, named in paths.py
CLIENT_STAMP = f"{paths.COMMAND_CLIENT}.source-sha256"


def install_command_client(report: Report, apt: bool) -> None:
    report.step(f"broker directory {paths.BROKER_DIR}", not _empty_dir_ok(paths.BROKER_DIR),
                functools.partial(_make_empty_dir, paths.BROKER_DIR))
    # The source's digest, kept beside the binary: an install that finds both unchanged
    # builds nothing, and so fetches no compiler (a second install changes nothing).
    stamp = hashlib.sha256(CLIENT_SOURCE.read_bytes() + " ".join(CLIENT_FLAGS).encode())
    current = (os.path.exists(paths.COMMAND_CLIENT)
               and (_read(CLIENT_STAMP) or "") == stamp.hexdigest())
    what = f"command client {paths.COMMAND_CLIENT}"
    fetched = [pkg for pkg in BUILD_PACKAGES if not _dpkg_installed(pkg)] if not current else []
    if fetched and not apt:
        print(f"  skipped    {paths.COMMAND_CLIENT} (needs {' '.join(fetched)}; "
              "hardening = brokered refuses to launch without it)")
        return

    def build() -> None:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        before = _installed_packages() if fetched else set()
        if fetched:
            _run(["apt-get", "update", "-qq"], env=env)
            _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *fetched],
                 env=env)
        try:
            with tempfile.TemporaryDirectory() as scratch:
                built = os.path.join(scratch, "command-client")
                _run(["gcc", *CLIENT_FLAGS, "-o", built, str(CLIENT_SOURCE)])
                with open(built, "rb") as handle:
                    _write_bytes(paths.COMMAND_CLIENT, handle.read(), 0o755)
            _write(CLIENT_STAMP, stamp.hexdigest(), 0o644)
        finally:
            # Exactly what the install above added, the compiler's dependencies too.
            added = sorted(_installed_packages() - before) if fetched else []
            if added:
                _run(["apt-get", "purge", "-y", "-qq", *added], env=env)

    report.step(what, not current, build)


def _installed_packages() -> set[str]:
    result = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\\n"], capture_output=True,
                            text=True, check=False)
    return set(result.stdout.split())


def _write_bytes(path: str, data: bytes, mode: int) -> None:
    staged = f"{path}.new"
    with open(staged, "wb") as handle:
        handle.write(data)
    os.chmod(staged, mode)
    os.replace(staged, path)


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
    """The scripts that put a hint before an install outside the workspace (hints.py)."""
    wanted = hints.wanted()
    target = Path(hints.HINTS_DIR)
    stale = {p.name for p in target.iterdir()} - set(wanted) if target.is_dir() else set()
    differ = [name for name, text in wanted.items()
              if _differs(str(target / name), text, 0o755)]

    def action() -> None:
        for name in stale:
            (target / name).unlink()
        for name in differ:
            _write(str(target / name), wanted[name], 0o755)
    report.step(f"install hints in {hints.HINTS_DIR} ({len(wanted)} package managers)",
                bool(stale or differ), action)


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
    stale = present - set(wanted)
    differ = [rel for rel, text in wanted.items() if _differs(str(target / rel), text, 0o644)]

    def action() -> None:
        for rel in stale:
            (target / rel).unlink()
        for rel in differ:
            _write(str(target / rel), wanted[rel], 0o644)
        # Byte-compiled now, as root: inside the sandbox the tree is read-only.
        compileall.compile_dir(str(target), quiet=1)
    report.step(f"verification checks in {VERIFICATION_DIR}", bool(stale or differ), action)


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


# ---------------------------------------------------------------- the integrity guard

def _read(path: str) -> str | None:
    """The file's text; None when it does not exist. One we cannot read stops the
    install with its path rather than being taken for absent and overwritten."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"{path}: cannot read it ({exc}); fix or move it and run "
                           "again") from None


def _integrity_state() -> dict[str, list[str] | bool]:
    try:
        data = json.loads(Path(integrity.STATE_FILE).read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def install_hooks(report: Report) -> None:
    for hook in (*integrity.HOOKS, integrity.REFUSE_HELPER, integrity.KEY_HELPER):
        path, text = integrity.hook_path(hook), integrity.hook_text(hook)
        what = f"{hook.event} hook" if hook.event else f"{hook.name} (a helper setting's stand-in)"
        report.step(f"{what} {path}", _differs(path, text, 0o755),
                    functools.partial(_write, path, text, 0o755))


def install_managed_settings(report: Report) -> None:
    """Merge our policy into Claude Code's managed settings; an administrator's keys stay."""
    path = integrity.MANAGED_SETTINGS
    text = _read(path)
    existing = integrity.parse_settings(text or "")
    if existing is None:
        print(f"  warning    {path} is not a JSON object we can parse: left alone, so the "
              "Claude Code prompt gate and auto-update policy are NOT installed")
        return
    merged, added = integrity.merge_settings(existing)
    state = _integrity_state()
    owned = sorted({*state.get("env_added", []), *added})  # type: ignore[misc]
    created = bool(state.get("created_settings", text is None))
    wanted_state = json.dumps({"env_added": owned, "created_settings": created}) + "\n"
    wanted = integrity.settings_text(merged)
    # Rewrite only when our policy is missing: an administrator's formatting survives.
    needed = text is None or merged != existing or _differs(path, text, 0o644)
    report.step(f"Claude Code managed settings {path} (prompt gate, session check, "
                "auto-update off)", needed, lambda: _write(path, wanted, 0o644))
    report.step(f"integrity record {integrity.STATE_FILE}",
                _differs(integrity.STATE_FILE, wanted_state, 0o644),
                lambda: _write(integrity.STATE_FILE, wanted_state, 0o644))


def install_unwrapped_settings(report: Report) -> None:
    """Our own drop-in: what an unwrapped Claude Code may run (nothing the agent wrote)."""
    path = integrity.UNWRAPPED_SETTINGS
    text = integrity.settings_text(integrity.unwrapped_settings())
    report.step(f"Claude Code drop-in {path} (unwrapped sessions: managed hooks and no MCP "
                "servers only)", _differs(path, text, 0o644), lambda: _write(path, text, 0o644))
    report.step(f"empty settings {integrity.EMPTY_SETTINGS} (bound over the drop-in inside)",
                _differs(integrity.EMPTY_SETTINGS, "{}\n", 0o444),
                lambda: _write(integrity.EMPTY_SETTINGS, "{}\n", 0o444))


def install_codex_config(report: Report) -> None:
    path = integrity.CODEX_MANAGED_CONFIG
    text = _read(path) or ""
    merged = integrity.codex_merge(text)
    if merged is None:
        print(f"  warning    {path} is not TOML we can parse: left alone, so the codex "
              "update check is NOT turned off")
        return
    report.step(f"codex managed config {path} (update check off)",
                _differs(path, merged, 0o644), lambda: _write(path, merged, 0o644))


def install_integrity(report: Report) -> None:
    install_hooks(report)
    install_managed_settings(report)
    install_unwrapped_settings(report)
    install_codex_config(report)


def _remove_file_and_empty_parent(path: str) -> None:
    os.unlink(path)
    # /etc/claude-code and /etc/codex exist only for these files when we made them.
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(path))


def uninstall_integrity(report: Report) -> None:
    """Take out what install_integrity put in; the administrator's own settings stay."""
    path = integrity.MANAGED_SETTINGS
    text = _read(path)
    existing = integrity.parse_settings(text or "") if text is not None else None
    state = _integrity_state()
    if existing is not None:
        added = tuple(state.get("env_added", ()))  # type: ignore[arg-type]
        remaining = integrity.unmerge_settings(existing, added)
        if not remaining and state.get("created_settings", False):
            report.step(f"remove {path} (it held only our policy)", True,
                        functools.partial(_remove_file_and_empty_parent, path))
        else:
            wanted = integrity.settings_text(remaining)
            report.step(f"our policy out of {path} (the rest kept)", remaining != existing,
                        lambda: _write(path, wanted, 0o644))
    dropin = integrity.UNWRAPPED_SETTINGS
    report.step(f"remove {dropin}", os.path.exists(dropin),
                functools.partial(_remove_file_and_empty_parent, dropin))
    codex = integrity.CODEX_MANAGED_CONFIG
    codex_text = _read(codex)
    if codex_text is not None:
        rest = integrity.codex_unmerge(codex_text)
        if rest.strip():
            report.step(f"our block out of {codex} (the rest kept)", rest != codex_text,
                        lambda: _write(codex, rest, 0o644))
        else:
            report.step(f"remove {codex} (it held only our block)", True,
                        functools.partial(_remove_file_and_empty_parent, codex))


# ---------------------------------------------------------------- commands

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
    probe = not options.no_host_check and (not report.check or paths.find_tool("unshare"))
    problem = userns_problem() if probe else None
    if problem:
        raise InstallError(f"refusing to install: {problem}")
    make_venv(report, paths.CORE_VENV, with_pip=False)
    install_package(report, paths.CORE_VENV, include_tools=False)
    if not options.no_tools:
        install_tools(report)
    install_files(report)
    install_command_client(report, apt=not options.no_apt)
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
        report.step(f"remove shim {path}", _is_shim(path), functools.partial(os.unlink, path))
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
                    not os.path.lexists(place) or _is_shim(place), restore)
    uninstall_integrity(report)
    for mount_point in (paths.GITCONFIG_INSIDE,):
        report.step(f"remove {mount_point}", os.path.exists(mount_point),
                    functools.partial(os.unlink, mount_point))
    report.step(f"remove {paths.LIBEXEC}", os.path.isdir(paths.LIBEXEC),
                lambda: shutil.rmtree(paths.LIBEXEC))
    if _read(paths.CONFIG_FILE) == config.DEFAULT_FILE:
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
