"""The launch: guard, prepare, build, exec (docs/explanation/architecture.md).

`_shadow NAME -- ARGS` lands here from the shim. Everything the sandbox will
be is decided by bwrap.build from the profile, /etc's configuration and the
host facts probed once; this module only orders the steps and owns the
resources a launch opens (the gitconfig pipe, the jail).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module: `signal` imports enum
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from . import (
    bwrap,
    config,
    controlfiles,
    gitconfig,
    guard,
    hostfacts,
    limits,
    paths,
    placeholders,
    profiles,
    seccomp,
    state,
    workspace,
)
from .errors import EXIT_CONFIG, EXIT_JAIL, SandboxError
from .janitor import Janitor
from .record import record, replace
from .trace import Trace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

JAIL_OFF_WARNING = (
    "claude-sandbox: warning: the egress jail is off (egress-jail = 0): the agent shares "
    "this container's network, including private networks, cloud metadata and services on "
    "127.0.0.1\n"
)


@record
class Request:
    agent: str
    command: tuple[str, ...] | None  # None: the real agent with `args`
    args: tuple[str, ...]


def _pipe_with(data: bytes) -> int:
    """A read end holding `data`, inheritable: bwrap copies it into the sandbox."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)  # a gitconfig is far below the pipe's 64 KiB
    finally:
        os.close(write_end)
    os.set_inheritable(read_end, True)
    return read_end


def load_config(agent: str, environ: Mapping[str, str]) -> config.Config:
    return config.load(environ, agent=agent, agents=profiles.AGENT_NAMES, path=paths.CONFIG_FILE)


def path_rules(cfg: config.Config, facts: hostfacts.HostFacts) -> workspace.PathRules:
    return workspace.PathRules(
        home=facts.home,
        homes=hostfacts.login_homes(facts.home),
        path_dirs=tuple(os.path.realpath(p) for p in facts.path if p.startswith("/")),
        store=state.store_root(cfg.state_dir, facts.home, facts.uid),
    )


def resolve_writable(cfg: config.Config, facts: hostfacts.HostFacts) -> bwrap.Writable:
    """The writable roots, each checked, and the control files each holds."""
    rules = path_rules(cfg, facts)
    where = cfg.origins.get("workspace-root", "the launch directory")
    root = workspace.check_writable(
        cfg.workspace_root or facts.cwd, rules, what="workspace", where=where
    )
    extra = tuple(
        workspace.check_writable(
            path, rules, what="allow-write path", directory=False,
            where=cfg.path_origins.get(path, "allow-write"),
        )
        for path in cfg.allow_write
    )
    table = controlfiles.controls(cfg.protect, cfg.unprotect)
    plans = []
    for top in (root, *extra):
        if not os.path.isdir(top):
            continue
        rows = derived_controls(top, facts)
        kinds = controlfiles.probe(controlfiles.candidates(top, table, [r for r, _ in rows]))
        plans.append(controlfiles.plan(top, table, rows, kinds))
    return bwrap.Writable(root, extra, tuple(plans))


def derived_controls(top: str, facts: hostfacts.HostFacts) -> list[tuple[str, str]]:
    """Control paths this host makes: PATH directories ahead of the system's, git's hooksPath."""
    rows = []
    for entry in facts.path:
        resolved = os.path.realpath(entry) if entry.startswith("/") else ""
        if resolved in paths.SYSTEM_DIRS or resolved == paths.SHIM_DIR:
            break  # after the system directories a planted name shadows nothing
        if resolved.startswith(top + "/") and os.path.isdir(resolved):
            rows.append((resolved[len(top) + 1 :], "on the launching PATH ahead of the system "
                         "directories: a program planted here runs in the user's shell"))
    hooks = hostfacts.git_hooks_path(top, facts.home)
    if hooks and hooks.startswith(top + "/"):
        rows.append((hooks[len(top) + 1 :], "git's core.hooksPath: hooks run from here"))
    rows += _git_dir_rows(top)
    return rows


def _git_dir_rows(top: str) -> list[tuple[str, str]]:
    """Where git's own directory is not plainly `.git`: worktrees and a `.git` file.

    A linked worktree's metadata (.git/worktrees/ID/commondir, config.worktree,
    gitdir) can send that worktree's git to a config and hooks of the agent's; a
    `.git` file (a `.bare` layout, a submodule) names a git directory whose config
    and hooks sit elsewhere in the workspace.
    """
    rows: list[tuple[str, str]] = []
    why = "a linked worktree's git metadata: where its config and hooks come from"
    worktrees = os.path.join(top, ".git", "worktrees")
    try:
        names = os.listdir(worktrees) if not os.path.islink(worktrees) else []
    except OSError:
        names = []
    for name in names:
        for leaf in ("commondir", "config.worktree", "gitdir"):
            if os.path.lexists(os.path.join(worktrees, name, leaf)):
                rows.append((f".git/worktrees/{name}/{leaf}", why))
    gitfile = os.path.join(top, ".git")
    if os.path.isfile(gitfile) and not os.path.islink(gitfile):
        try:
            with open(gitfile, encoding="utf-8", errors="replace") as handle:
                line = handle.readline().strip()
        except OSError:
            line = ""
        if line.startswith("gitdir:"):
            target = os.path.realpath(os.path.join(top, line[len("gitdir:"):].strip()))
            if target.startswith(top + "/"):
                relative = target[len(top) + 1 :]
                rows += [(f"{relative}/{leaf}", "the git directory the .git file names")
                         for leaf in ("config", "hooks", "commondir", "config.worktree")]
    return rows


def launch(request: Request, environ: Mapping[str, str]) -> int:
    """Run the request inside the sandbox; returns only when a parent must wait, with its status."""
    trace = Trace(environ.get("CLAUDE_SANDBOX_TRACE") == "1")
    profile = profiles.get(request.agent)
    if guard.inside_sandbox():
        _exec_nested(profile, request, environ)
    # bwrap shares the terminal's foreground group with the agent: ignoring Ctrl-C
    # and Ctrl-\\ from here on (inherited through exec) keeps bwrap alive when the
    # agent gets them; _enter restores them for the agent (enter.reset_signals),
    # and keeps ignored only what this launch itself inherited ignored (nohup).
    inherited = (("int", _signal.SIGINT), ("quit", _signal.SIGQUIT),
                 ("hup", _signal.SIGHUP), ("term", _signal.SIGTERM))
    signals = ",".join(n for n, s in inherited if _signal.getsignal(s) == _signal.SIG_IGN)
    for signum in (_signal.SIGINT, _signal.SIGQUIT):
        _signal.signal(signum, _signal.SIG_IGN)
    cfg = load_config(profile.name, environ)
    if request.command is None:
        _say_held_back(profile, cfg, environ)
    limits.prefer_for_oom()
    limit_plan = limits.plan_limits(
        cfg.max_pids, cfg.max_memory, limits.probe_cgroups(), os.getuid()
    )
    for warning in limit_plan.warnings:
        sys.stderr.write(f"claude-sandbox: warning: {warning}\n")
    trace.phase("config")

    # Before anything exists that a killed launcher would leave behind.
    janitor = Janitor()
    cgroup = limits.create(limit_plan)  # None unless a cap needs one
    for directory in cgroup.dirs if cgroup is not None else ():
        janitor.tell("cgroup", directory)
    jail = None
    prepared: Prepared | None = None
    terminal = _terminal_modes()
    try:
        if cfg.egress_jail:
            from . import jail_start

            jail_start.preflight(needs_socat=bool(cfg.local_ports or cfg.callback_ports))
            if cgroup is not None:
                cgroup.join()  # the holder and everything it starts inherit the caps
            # Started first, before jail.py is even imported: the holder's namespace
            # and pasta's attach are the longest wait, and the rest overlaps them.
            early = jail_start.begin(trace.enabled)
            from . import jail as jail_module  # only a jailed launch pays for it

            settings = jail_module.JailSettings(
                allow_ip=cfg.allow_ip,
                host=_host_addresses(),
                local_ports=cfg.local_ports,
                callback_ports=cfg.callback_ports,
                trace=trace.enabled,
            )
            jail = jail_module.start(settings, early)
            trace.phase("jail started")
        else:
            sys.stderr.write(JAIL_OFF_WARNING)
        prepared = _prepare(profile, cfg, limit_plan, request, environ, jail, signals, janitor)
        trace.phase("plan built")
        # The launcher always waits: placeholders and cgroups are removed, and the
        # session's changes reported, only by a process that outlives the sandbox.
        started = time.time_ns()
        argv, env, fds = prepared.argv, prepared.env, prepared.fds
        if jail is not None:
            status = jail.run(argv, env, fds)
        else:
            status = limits.run_supervised(argv, env, cgroup, pass_fds=fds)
        _report_changes(cfg, prepared.layout, started)
        return status
    finally:
        if jail is not None:
            jail.close()
        if prepared is not None:
            _undo(prepared)  # first: the /proc helper is in the cgroup too
        if cgroup is not None:
            cgroup.leave()
            cgroup.remove()
        _restore_terminal(terminal)
        janitor.done()


def _terminal_modes() -> list[Any] | None:
    """The launching terminal's modes, to give back whatever state the agent leaves it in."""
    import termios

    try:
        return termios.tcgetattr(0) if os.isatty(0) else None
    except termios.error:
        return None


def _restore_terminal(modes: list[Any] | None) -> None:
    """An agent killed in raw mode leaves the terminal unusable; the shell gets it back sane.

    Only from the terminal's foreground group: a background launch writing the
    modes would be stopped by SIGTTOU.
    """
    if modes is None:
        return
    import termios

    try:
        if os.tcgetpgrp(0) == os.getpgrp():
            termios.tcsetattr(0, termios.TCSADRAIN, modes)
    except (OSError, termios.error):
        pass


def _root_only(cfg: config.Config, facts: hostfacts.HostFacts,
               layout: bwrap.Writable) -> dict[str, bool]:
    """On a root launch: the paths outside the workspace root keeps from others (rootonly.py)."""
    from . import mountinfo, rootonly

    store = state.store_root(cfg.state_dir, facts.home, facts.uid)
    mounts = [(m.mountpoint, m.fstype) for m in mountinfo.parse(mountinfo.read())]
    masked = [*facts.runtime_dirs, "/run", "/proc", "/sys", "/dev", "/tmp", facts.home, store]
    # The workspace is walked too (and only filtered below): a cache made from another
    # workspace must know the root-only files of this one.
    skip = [*masked, *rootonly.pseudo_mounts(mounts)]
    private = rootonly.private_paths(os.path.join(store, rootonly.CACHE_NAME), skip)
    shown = [*masked, layout.workspace, *layout.allow_write]
    return {path: is_dir for path, is_dir in private.items()
            if not any(path == r or path.startswith(r.rstrip("/") + "/") for r in shown)}


def _undo(prepared: Prepared) -> None:
    """After the session: the /proc helper reaped, the placeholders removed."""
    if prepared.helper is not None:
        try:
            os.kill(prepared.helper, 9)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(prepared.helper, 0)
        except ChildProcessError:
            pass
    for path in prepared.made.remove():
        sys.stderr.write(f"claude-sandbox: warning: {path} was a placeholder the sandbox made "
                         "and has changed; left as it is\n")


def _host_addresses() -> tuple[str, ...]:
    """This network namespace's own addresses and gateways, read before the jail exists."""
    from .routes import host_addresses

    texts = []
    for name in ("/proc/net/fib_trie", "/proc/net/route"):
        try:
            with open(name, encoding="ascii", errors="replace") as handle:
                texts.append(handle.read())
        except OSError as error:
            raise SandboxError(f"egress jail: cannot read {name} ({error.strerror}): the "
                               "host's addresses must be known to block them", EXIT_JAIL) from None
    return host_addresses(texts[0], texts[1])


def _codex_config() -> int:
    """A pipe holding codex's managed config for inside (codexconfig.py)."""
    from . import codexconfig

    try:
        with open(paths.CODEX_MANAGED_CONFIG, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as error:
        raise SandboxError(f"{paths.CODEX_MANAGED_CONFIG}: cannot be read ({error})",
                           EXIT_CONFIG) from None
    return _pipe_with(codexconfig.inside(text).encode())


def _say_held_back(profile: profiles.Profile, cfg: config.Config,
                   environ: Mapping[str, str]) -> None:
    """One line when a credential variable is set here and the sandbox holds it back."""
    names = profiles.held_back(profile, environ, cfg.pass_env)
    if names:
        lines = "".join(f"pass-env = {name}\n" for name in names)
        sys.stderr.write(
            f"claude-sandbox: {', '.join(names)} {'is' if len(names) == 1 else 'are'} set "
            f"here but not passed into the sandbox; to pass {'it' if len(names) == 1 else 'them'}"
            f", add to {paths.CONFIG_FILE}: {lines.strip().replace(chr(10), '; ')} "
            f"(or log in inside: the login stays in the agent's state store)\n")


def _report_changes(cfg: config.Config, layout: bwrap.Writable, since_ns: int) -> None:
    """Control files the session made below the top of a writable root (aftermath.py)."""
    from . import aftermath

    table = controlfiles.controls(cfg.protect, cfg.unprotect)
    names = frozenset(control.path.split("/")[0] for control in table)
    roots = [r for r in (layout.workspace, *layout.allow_write) if os.path.isdir(r)]
    for line in aftermath.report_lines(*aftermath.scan(roots, names, since_ns)):
        sys.stderr.write(f"claude-sandbox: warning: {line}\n")


def _exec_nested(profile: profiles.Profile, request: Request, environ: Mapping[str, str]) -> None:
    """Already inside a sandbox (a kernel fact): run the program as it is, no second jail."""
    if request.command is not None:
        path = environ.get("PATH", ":".join(paths.SYSTEM_DIRS))
        program = (_resolve_command(request.command, path), *request.command[1:])
    else:
        program = (hostfacts.real_binary(profile.name), *profiles.agent_args(profile, request.args))
    try:
        os.execve(program[0], list(program), dict(environ))
    except OSError as error:
        raise SandboxError(f"cannot run {program[0]}: {error.strerror}", 126) from None


def _resolve_command(command: Sequence[str], path: str,
                     seen_as: Callable[[str], str | None] = lambda d: d) -> str:
    """argv[0] of a `shell` command, found on the inner PATH as the inside sees it.

    `seen_as(directory)` is where the launcher can look at what the sandbox will
    show at that directory, or None where the sandbox shows nothing there (a
    private tmpfs): a pyenv shim in the outer home does not exist inside.
    """
    name = command[0]
    if "/" in name:
        return name
    for directory in path.split(":"):
        # uv and uvx come back read-only from the outer ~/.local/bin (bwrap.LOCAL_BIN_TOOLS).
        visible = directory if (directory.endswith("/.local/bin") and name in ("uv", "uvx")) \
            else seen_as(directory)
        if visible is None:
            continue
        candidate = os.path.join(visible, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.join(directory, name)
    raise SandboxError(f"{name}: command not found on the sandbox's PATH", 127)


def _inner_view(facts: hostfacts.HostFacts) -> Callable[[str], str | None]:
    """Where the launcher sees what the sandbox will show at a directory (bwrap.py's mounts)."""
    hidden = (*facts.runtime_dirs, "/tmp", "/dev")

    def seen_as(directory: str) -> str | None:
        if directory == facts.home or directory.startswith(facts.home + "/"):
            return facts.store_home + directory[len(facts.home):]
        if any(directory == h or directory.startswith(h + "/") for h in hidden):
            return None
        return directory

    return seen_as


def probe(
    profile: profiles.Profile, cfg: config.Config, environ: Mapping[str, str], *, dry_run: bool
) -> hostfacts.HostFacts:
    return hostfacts.probe(
        environ,
        agent=profile.name,
        wanted=lambda home: bwrap.optional_paths(profile, home),
        tmp_base=None if dry_run else profile.tmp_dir,
        store_home=lambda home, uid: state.agent_home(
            state.store_root(cfg.state_dir, home, uid), profile.name
        ),
    )


def plan_for(
    profile: profiles.Profile,
    cfg: config.Config,
    request: Request,
    facts: hostfacts.HostFacts,
    environ: Mapping[str, str],
    extras: bwrap.Extras,
) -> bwrap.Plan:
    layout = resolve_writable(cfg, facts)
    if request.command is None:
        command: tuple[str, ...] = (facts.real_binary, *profiles.agent_args(profile, request.args))
    else:
        inner = bwrap.inner_path(facts)
        command = (_resolve_command(request.command, inner, _inner_view(facts)),
                   *request.command[1:])
    return bwrap.build(profile, cfg, facts, layout, extras, command, environ)


def _prepare(
    profile: profiles.Profile,
    cfg: config.Config,
    limit_plan: limits.LimitPlan,
    request: Request,
    environ: Mapping[str, str],
    jail: object | None,
    signals: str,
    janitor: Janitor,
) -> Prepared:
    bwrap_path = paths.tool("bwrap")
    facts = probe(profile, cfg, environ, dry_run=False)
    store = state.store_root(cfg.state_dir, facts.home, facts.uid)
    state.ensure_home(store, profile.name, facts.home, profile.imports, facts.uid,
                      default_root=cfg.state_dir is None)
    placeholders.sweep(store)
    janitor.tell("store", store)
    text = gitconfig.render(
        gitconfig.identity(facts.user, facts.home), gitconfig.forge_helpers(cfg.no_forge)
    )
    git_fd = _pipe_with(text.encode())
    codex_fd = _codex_config() if profile.name == "codex" else None
    seccomp_fd = seccomp.filter_fd(cfg.hardening)
    extras = bwrap.Extras(
        gitconfig_fd=git_fd,
        codex_config_fd=codex_fd,
        seccomp_fd=seccomp_fd,
        resolv_conf=getattr(jail, "resolv_conf", None),
        jailed=jail is not None,
    )
    plan = plan_for(profile, cfg, request, facts, environ, extras)
    helper, hide_fd = None, None
    if plan.hide_outer_proc or facts.uid == 0:
        from . import procmask  # a root launch, or where only the outer /proc is bound

        layout = plan.layout
        private = (lambda: _root_only(cfg, facts, layout)) if facts.uid == 0 else None
        masks = procmask.Masks(plan.hide_outer_proc, private, paths.EMPTY_DIR, paths.EMPTY_FILE)
        helper, hide_fd = procmask.start_helper(masks)
    plan = with_enter(plan, cfg, limit_plan, signals, hide_fd)
    # The agent shares the launching terminal, as it would without the sandbox:
    # job control, resizes and hang-ups reach it directly. What a shared
    # terminal allows beyond that, pushing input with TIOCSTI or TIOCLINUX, the
    # seccomp filter refuses (check 45; docs/explanation/terminal.md).
    argv = plan.argv(bwrap_path)
    wanted = [p for control in plan.layout.controls for p in control.placeholders]
    held = [p for control in plan.layout.controls for p in control.read_only]
    made = placeholders.make(store, wanted, held)
    fds = tuple(fd for fd in (git_fd, seccomp_fd, codex_fd, hide_fd) if fd is not None)
    return Prepared(argv, plan.environ(), fds, made, plan.layout, helper)


@record
class Prepared:
    """What a launch made before the sandbox starts, and must undo after it."""

    argv: list[str]
    env: dict[str, str]
    fds: tuple[int, ...]
    made: placeholders.Made
    layout: bwrap.Writable
    helper: int | None  # the /proc helper's pid (procmask.py)


def with_enter(
    plan: bwrap.Plan, cfg: config.Config, limit_plan: limits.LimitPlan, signals: str = "",
    hide_fd: int | None = None,
) -> bwrap.Plan:
    """Put `_enter` (Landlock, in-sandbox rlimits) between bwrap and the program.

    Landlock must be entered inside bwrap (a process already in a domain cannot
    run bwrap), so the last step inside is the same isolated interpreter.
    """
    kernel = limits.kernel_settings(
        cfg.hardening, limit_plan, bwrap.writable_targets(plan.ops), bwrap.exec_targets(plan.ops),
        hide_outer_proc=hide_fd,
    )
    prefix = (*paths.internal_argv("_enter"), "--keep-ignored", signals,
              *limits.enter_argv(kernel), "--")
    return replace(plan, command=(*prefix, *plan.command))
