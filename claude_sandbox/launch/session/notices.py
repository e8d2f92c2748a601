"""What a launch says on stderr, before the session and after it: one line a subject.

Before: a cap that holds less than its name says (limits.py), an allow-socket that is
not there, a credential or proxy variable set here and held back, with the line that
passes it. After: what the egress proxy refused, and under `egress-policy = learn` the
lines that would have allowed the session. Never a secret's value.
"""

from __future__ import annotations

import os
import sys

from claude_sandbox.core import kernel, paths
from claude_sandbox.launch.configure import config, profiles
from claude_sandbox.launch.facts.hostfacts import HostFacts
from claude_sandbox.launch.planner import environment
from claude_sandbox.launch.planner.limits import LimitPlan

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def at_start(profile: profiles.Profile, cfg: config.Config, environ: Mapping[str, str],
             limit_plan: LimitPlan, *, agent: bool) -> None:
    """The lines before the session; `agent`: the agent itself is launched (not `shell`)."""
    if agent:
        _held_back(profile, cfg, environ)
    for warning in limit_plan.warnings:
        sys.stderr.write(f"claude-sandbox: warning: {warning}\n")
    for path in cfg.allow_socket:
        if not os.path.lexists(path):
            where = cfg.path_origins.get(path, "allow-socket")
            sys.stderr.write(f"claude-sandbox: warning: allow-socket {path} ({where}) is not "
                             "there now: nothing to connect to inside until it is, and the "
                             "next launch shows it\n")


def hidden_path(facts: HostFacts) -> None:
    """One line naming the launching PATH's entries in the outer home that the sandbox
    does not show (its $HOME is the agent's store): a tool found there outside is not
    found inside, and the user is told how to show it."""
    home = facts.home.rstrip("/") + "/"
    shown = [*facts.toolchains, *(os.path.join(facts.home, rel) for rel in (".local/bin",))]
    hidden = [entry for entry in dict.fromkeys(facts.path)
              if entry.startswith(home) and not paths.under_any(entry, shown)]
    if not hidden:
        return
    lines = []
    for entry in hidden:
        rel = entry[len(home):]
        lines.append(f"~/{rel} (a home's dot-directory stays out; known toolchains come "
                     "back read-only)" if rel.startswith(".") else
                     f"~/{rel} (allow-read = {entry} shows it read-only)")
    sys.stderr.write(f"claude-sandbox: PATH entries in your home that the sandbox does not "
                     f"show: {'; '.join(lines)}\n")


def upstream(why: str) -> None:
    """Why the proxy a variable names is not the egress proxy's way out, if it is not."""
    if why:
        sys.stderr.write(f"claude-sandbox: {why}\n")


def _held_back(profile: profiles.Profile, cfg: config.Config,
               environ: Mapping[str, str]) -> None:
    """One line when a credential variable is set here and the sandbox holds it back.
    (A proxy variable is not passed in with the jail on: the egress proxy chains to it,
    and `upstream` says when it cannot.)"""
    urls = [name for name in environment.URL_SETTINGS if environ.get(name)
            and environment.secret_in_url(environ[name]) and name not in cfg.pass_env]
    if urls:
        sys.stderr.write(f"claude-sandbox: {', '.join(urls)} may carry a key (a user part or "
                         "a query in the URL), so it is not passed in; to pass it, add to "
                         f"{paths.CONFIG_FILE}: " + "; ".join(f"pass-env = {u}" for u in urls)
                         + "\n")
    declared = {line.split()[0] for line in cfg.credential}
    names = [name for name in profiles.held_back(profile, environ, cfg.pass_env)
             if name not in declared]
    if names:
        from claude_sandbox.launch.facts.credentials import DEFAULTS

        lines = "; ".join(f"credential = {name}" if name in DEFAULTS else f"pass-env = {name}"
                          for name in names)
        sys.stderr.write(
            f"claude-sandbox: {', '.join(names)} {'is' if len(names) == 1 else 'are'} set "
            f"here but not passed into the sandbox; to pass {'it' if len(names) == 1 else 'them'}"
            f", add to {paths.CONFIG_FILE}: {lines} "
            f"(or log in inside: the login stays in the agent's state store)\n")


def caps(events: dict[str, int], status: int, limit_plan: LimitPlan) -> None:
    """What a cap did to the session, in one line each: a memory cap's kills, a pids
    cap's refused forks; without a memory cgroup, a session that died of a signal under
    RLIMIT_DATA is told that a process out of its memory aborts that way."""
    if events.get("oom_kill"):
        sys.stderr.write(f"claude-sandbox: the memory cap (max-memory) killed "
                         f"{events['oom_kill']} process(es) of the session\n")
    if events.get("pids_max"):
        sys.stderr.write(f"claude-sandbox: the process cap (max-pids) refused "
                         f"{events['pids_max']} new process(es) in the session\n")
    per_process = dict(limit_plan.rlimits).get(kernel.RLIMIT_DATA)
    if per_process and status in (128 + 6, 128 + 11) and not events.get("oom_kill"):
        sys.stderr.write(f"claude-sandbox: the session ended by signal {status - 128}; "
                         f"max-memory holds per process here (RLIMIT_DATA {per_process}), "
                         "and a process that runs out of it may end so\n")


def egress(path: str, policy: str) -> None:
    """One line on what the proxy refused (nothing when it refused nothing); under learn,
    the allow-domain lines that would have allowed the session."""
    from claude_sandbox.jail import egressrecord

    try:
        entries = egressrecord.read(path)
    except OSError:
        return
    line = egressrecord.summary(entries)
    if line:
        sys.stderr.write(f"claude-sandbox: {line}\n")
    if policy == "learn":
        lines = egressrecord.learned(entries)
        sys.stderr.write("claude-sandbox: egress-policy = learn: the lines that would allow "
                         f"this session, for {paths.CONFIG_FILE}:\n")
        for learned in lines or ["(no connection was made)"]:
            sys.stderr.write(f"  {learned}\n")


def squatted_store(state_dir: str, store: str) -> None:
    """state-dir's name for this user held by someone else: say so, and where the store
    is instead (state.store_root)."""
    from claude_sandbox.launch.session import state

    path = os.path.join(state_dir, str(os.getuid()))
    if store == path:  # the store is state-dir's: nothing stood in its way
        return
    owner = state.squatted_store(path, os.getuid())
    if owner is not None:
        sys.stderr.write(f"claude-sandbox: warning: {path} is not yours (uid {owner} made it "
                         f"first in the shared state-dir); your state store is {store} "
                         f"instead until root removes it\n")
