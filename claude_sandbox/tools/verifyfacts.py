"""The facts `claude-sandbox verify` gathers outside before a run: what the host, the
configuration and the launching environment say the sandbox must show or refuse, which
the checks compare with what they see inside."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
from collections.abc import Mapping, Sequence
from typing import Any

from claude_sandbox.core import paths
from claude_sandbox.launch.configure import config as config_module
from claude_sandbox.launch.configure import profiles
from claude_sandbox.launch.facts import hostfacts
from claude_sandbox.launch.overlay import controlfiles
from claude_sandbox.launch.session import state
from claude_sandbox.tools.verifyplant import (
    cgroup_bases,
    host_addresses,
    nameservers,
    outer_tty_rdev,
)

TOOLS_PYTHON = f"{paths.TOOLS_VENV}/bin/python"  # the runner's own interpreter
# Paths whose outer st_dev the checks compare with the inside one: equal means
# a write there lands on the outer file system.
HOME_PATHS = (
    "", ".bashrc", ".profile", ".bash_profile", ".zshrc", ".gitconfig", ".npmrc", ".ssh",
    ".config", ".config/gh", ".config/glab-cli", ".config/autostart", ".config/systemd",
    ".config/git", ".local", ".local/bin", ".local/share", ".local/share/applications",
    ".local/share/claude", ".local/share/uv", ".local/share/uv/tools", ".local/share/pipx",
    ".local/share/nvim", ".local/state", ".cache", ".cache/pre-commit", ".cache/uv", ".npm",
    ".claude", ".claude/settings.json", ".claude.json", ".codex", ".codex/config.toml",
    ".codex/packages", ".pi", ".pi/agent", ".pi/agent/extensions",
)


def outer_devs(paths_: Sequence[str]) -> dict[str, int]:
    devs = {}
    for path in paths_:
        with contextlib.suppress(OSError):
            devs[path] = os.stat(path).st_dev
    return devs


def outer_ids(paths_: Sequence[str]) -> dict[str, list[int]]:
    ids = {}
    for path in paths_:
        with contextlib.suppress(OSError):
            info = os.stat(path)
            ids[path] = [info.st_dev, info.st_ino]
    return ids


def _allowed_name(agent: str, lines: tuple[str, ...]) -> str:
    """An exact name the allow-list allows on 80 and 443, for checks 77 and 78."""
    from claude_sandbox.jail import egresspolicy

    for rule in egresspolicy.rules_for(agent, lines):
        if not rule.pattern.startswith("*.") and rule.ports == egresspolicy.WEB_PORTS:
            return rule.pattern
    return ""


def brokered_facts(facts: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """What the launch will broker (credentials.py), for checks 04, 83 and 84: the
    variables and forge files that must hold sentinels, and each real value's SHA-256
    (never the value: the facts file is in the workspace, readable inside)."""

    from claude_sandbox.launch.facts import credentials

    forge = {} if facts["no_forge"] else credentials.read_forge(str(facts["home"]))
    brokered = credentials.broker(facts["credential_lines"], environ, forge)
    return {"brokered_variables": [name for name, _ in brokered.env],
            "brokered_sha256": [hashlib.sha256(s.real.encode()).hexdigest()
                                for s in brokered.secrets],
            "brokered_files": [os.path.join(str(facts["home"]), rel) for rel, _ in brokered.forge]}


def gather(agent: str, workdir: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """The facts only the outside knows, for the checks inside."""
    cfg = config_module.load(agent, environ)
    home = os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    root = state.store_root(cfg.state_dir, home, os.getuid())
    # Made now (the launch would make it, with the same first import) so that its
    # inode can be compared with the $HOME the checks find inside.
    store_home = state.ensure_home(root, agent, home, profiles.get(agent).imports,
                                   os.getuid(), default_root=cfg.state_dir is None)
    path_entries = [p for p in environ.get("PATH", "").split(":") if p]
    watched = ["/dev", "/tmp", "/var/tmp", "/workspaces", os.path.dirname(workdir), "/etc",
               paths.SHIM_DIR, *path_entries,
               *(os.path.join(home, rel) if rel else home for rel in HOME_PATHS)]
    from claude_sandbox.launch.planner import mounts

    real = os.path.realpath(os.path.join(paths.REAL_BIN_DIR, agent))
    return {
        "agent": agent,
        "uid": os.getuid(),
        "home": home,
        "store_home": store_home,
        "store_root": root,
        "toolchains": [p for p in (os.path.join(home, t) for t in mounts.TOOLCHAINS)
                       if os.path.isdir(p) and not os.path.islink(p)],
        "toolchain_secrets": list(hostfacts.probe_secrets(home, mounts.TOOLCHAIN_SECRETS)),
        "workspace": os.path.realpath(workdir),
        "workdir": workdir,
        "path": path_entries,
        "ipc_ns": os.readlink("/proc/self/ns/ipc"),
        "uts_ns": os.readlink("/proc/self/ns/uts"),
        "net_ns": os.readlink("/proc/self/ns/net"),
        "pid_ns": os.readlink("/proc/self/ns/pid"),
        "outer_devs": outer_devs(watched),
        "outer_ids": outer_ids(watched),
        "store_home_id": outer_ids([store_home]).get(store_home),
        "controls": [c.path for c in controlfiles.controls(cfg.protect, cfg.unprotect)],
        "outer_tty_rdev": outer_tty_rdev(),
        "outer_nameservers": nameservers(),
        "dns_forwarder": paths.DNS_FORWARDER,
        "egress_jail": cfg.egress_jail,
        "egress_policy": cfg.egress_policy,
        "upstream_proxy": _upstream_proxy(cfg, environ),
        "allowed_name": _allowed_name(agent, cfg.allow_domain),
        "tmpfs_size": cfg.tmpfs_size,
        "cgroup_bases": cgroup_bases(),
        "jail_may_widen": "egress-jail" in cfg.env_may_widen,
        "hardening": cfg.hardening,
        "allow_vsock": cfg.allow_vsock,
        "agent_programs": _agent_programs(cfg.hardening, environ),
        "agent_connect": list(brokered_connect(cfg, environ)),
        "allow_write": list(cfg.allow_write),
        "pass_env": list(cfg.pass_env),
        "credential_lines": list(cfg.credential),
        "no_forge": cfg.no_forge,
        "tls_dir": os.path.join(root, "tls"),
        "max_pids": cfg.max_pids,
        "max_memory": cfg.max_memory,
        "real_binary": real,
        "runtime_sockets": [s for s in mounts.RUNTIME_SOCKETS if os.path.exists(s)],
        "allow_read": list(cfg.allow_read),
        "outer_root": sorted(os.listdir("/")),
        "other_homes": _other_homes(home),
        # The operator's file outside, as check 96 compares the copy inside with it.
        "codex_managed_config": config_module.read_file(paths.CODEX_MANAGED_CONFIG) or "",
    }


def _other_homes(home: str) -> list[str]:
    """Every other account's home that exists here: check 72 looks for them inside."""
    found = {os.path.realpath(e.pw_dir) for e in pwd.getpwall()
             if e.pw_dir not in ("", "/") and os.path.isdir(e.pw_dir)}
    from claude_sandbox.launch.planner import reads

    # System accounts' homes lie in trees the sandbox shows, or nowhere.
    shown = [f"/{name}" for name in reads.SYSTEM_ROOTS] + ["/dev", "/proc", "/run", "/tmp",
                                                            "/nonexistent"]
    return sorted(h for h in found - {home, "/"}
                  if not any(h == t or h.startswith(t + "/") for t in shown))


def _upstream_proxy(cfg: Any, environ: Mapping[str, str]) -> str:
    """ADDRESS:PORT of the proxy the egress proxy chains to here, or "" (check 93)."""
    from claude_sandbox.jail import upstreamproxy
    from claude_sandbox.launch.facts.gather import upstream_proxy

    if not cfg.egress_jail:
        return ""
    chained = upstreamproxy.Upstream.decode(upstream_proxy(environ, host_addresses())[0])
    return f"{chained.address}:{chained.port}" if chained else ""


def _agent_programs(level: str, environ: Mapping[str, str]) -> list[str]:
    """Under brokered: what the checks' own interpreter may execute (launch/planner/brokered.py)."""
    if level != "brokered":
        return []
    from claude_sandbox.launch.planner import brokered

    return list(brokered.read(TOOLS_PYTHON, TOOLS_PYTHON, environ).programs)


def brokered_connect(cfg: Any, environ: Mapping[str, str]) -> tuple[int, ...]:
    """The ports the agent may connect to under brokered, from what could reach inside."""
    from claude_sandbox.launch.planner import brokered

    passed = {name: environ[name] for name in cfg.pass_env if name in environ}
    return brokered.connect_ports(list(passed.values()), cfg.local_ports)
