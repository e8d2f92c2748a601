"""The launch's entry: `_launch NAME -- ARGS` lands here from the shim.

The order (docs/explanation/architecture.md): the nesting guard; the terminal
signals the launch ignores; the janitor, started before anything exists that a
killed launcher would leave behind; on a root launch the late-mount
helper, whose read of the root-only walk's directory times then runs on the core the
launcher's imports and configuration leave idle; then the steps (steps.py).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module: `signal` imports enum
import os

from claude_sandbox.core import guard, paths, process
from claude_sandbox.core.errors import SandboxError
from claude_sandbox.core.trace import Trace
from claude_sandbox.inside.spec import TERMINAL_SIGNALS
from claude_sandbox.launch.configure.request import Request
from claude_sandbox.launch.session.janitor import Janitor

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from claude_sandbox.launch.session.procmask import Helper

__all__ = ["Request", "inherited_ignored", "launch", "state_dir_line"]

# bwrap shares the terminal's foreground group with the agent: the launch ignores
# Ctrl-C and Ctrl-\\ (inherited through exec) so that bwrap stays alive when the
# agent gets them; the inner stage restores them for the agent, and keeps ignored only what
# this launch itself inherited ignored (nohup).
def inherited_ignored() -> tuple[str, ...]:
    """The terminal signals this process inherited ignored (nohup): the agent keeps them so."""
    return tuple(name for name, signum in TERMINAL_SIGNALS.items()
                 if _signal.getsignal(signum) == _signal.SIG_IGN)


def launch(request: Request, environ: Mapping[str, str]) -> int:
    """Run the request inside the sandbox; returns the session's status once all is undone."""
    trace = Trace(environ.get("CLAUDE_SANDBOX_TRACE") == "1")
    if guard.inside_sandbox():
        _exec_nested(request, environ)
    # A launcher that inherited SIGCHLD ignored would have its children reaped by the
    # kernel: no status for the session, and pids reused while the launch still names
    # them (check 103).
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
    keep_ignored = inherited_ignored()
    for signum in (_signal.SIGINT, _signal.SIGQUIT):
        _signal.signal(signum, _signal.SIG_IGN)
    # Nothing the launcher inherited reaches a program it spawns, the janitor first
    # (check 102); False where /proc cannot list the descriptors.
    janitor = Janitor(process.cloexec_inherited())
    try:
        helper = _early_helper()
        try:
            from claude_sandbox.launch import steps  # after the fork: see the docstring
        except BaseException:
            if helper is not None:
                from claude_sandbox.launch.session import procmask

                procmask.stop(helper, close=True)
            raise
        return steps.run(request, environ, trace, janitor, keep_ignored, helper)
    finally:
        janitor.done()
        trace.phase("torn down")


def _early_helper() -> Helper | None:
    """On a root launch, the late-mount helper, reading the store's walk cache from now on
    (ADR 0015). The store is where the operator's state-dir line puts it, read ahead of
    the configuration (`_state_dir_ahead`); where the configuration then says otherwise,
    steps.py starts another helper on that store's cache, and this one's reading is never
    used for it (rootonly.covers takes a reading only of the walk's own cache)."""
    if os.getuid() != 0:  # plan.masks_root_only, before the planner is imported
        return None
    from claude_sandbox.launch.facts import hostfacts, rootcache
    from claude_sandbox.launch.session import state

    state_dir = _state_dir_ahead()
    if state_dir is not None:
        # Read ahead only from root's store made already, in a state-dir the launch itself
        # accepts (no one else may rename in it): in a shared (1777) one, a name not yet
        # made could be made by another user, and removed again before the configuration
        # is read (ADR 0015). The configuration's helper reads that store then.
        ours = os.path.join(state_dir, "0")
        try:
            state.check_state_dir(state_dir, 0)
        except SandboxError:
            state_dir = None
        if state.squatted_store(ours, 0) is not None or not os.path.isdir(ours):
            state_dir = None
    store = state.store_root(state_dir, hostfacts.login_home(), 0)
    cache = os.path.join(store, rootcache.CACHE_NAME)
    # None where no tree is walked (ADR 0020: a launch that shows every tree through a
    # view removes the cache): prepare() forks the helper where it has work. The helper's
    # module is imported only where one is forked.
    if not os.path.exists(cache):
        return None
    from claude_sandbox.launch.session import procmask

    return procmask.start_helper(cache)


def _state_dir_ahead() -> str | None:
    """The operator's state-dir, read before the parser is imported (state_dir_line)."""
    try:
        with open(paths.CONFIG_FILE, encoding="utf-8") as handle:
            return state_dir_line(handle.read())
    except (OSError, UnicodeDecodeError):
        return None


def state_dir_line(text: str) -> str | None:
    """The last `state-dir = PATH` line's path. A guess, not the configuration: where the
    parser disagrees (a line it refuses), the guess costs a second helper, nothing else."""
    found = None
    for raw in text.splitlines():
        name, sep, value = raw.split("#", 1)[0].partition("=")
        if sep and name.strip() == "state-dir" and value.strip().startswith("/"):
            found = os.path.normpath(value.strip())
    return found


def _exec_nested(request: Request, environ: Mapping[str, str]) -> None:
    """Already inside a sandbox (a kernel fact): run the program as it is, no second jail."""
    from claude_sandbox.launch.configure import profiles
    from claude_sandbox.launch.facts import gather, hostfacts

    profile = profiles.get(request.agent)
    if request.command is not None:
        path = environ.get("PATH", ":".join(paths.SYSTEM_DIRS))
        program = (gather.resolve_command(request.command, path), *request.command[1:])
    else:
        program = (hostfacts.real_binary(profile.name), *profiles.agent_args(profile, request.args))
    try:
        os.execve(program[0], list(program), dict(environ))
    except OSError as error:
        raise SandboxError(f"cannot run {program[0]}: {error.strerror}", 126) from None
