"""Entry points. The launch path imports nothing it does not need.

`_launch`, `_enter` and `_janitor` are called by the shim, bwrap and
the janitor, never by a person; they are dispatched before argparse or any operator
code is imported. Every SandboxError ends here, as one line and its status
(core/errors.EXIT_STATUSES).
"""

from __future__ import annotations

import gc
import os  # every entry point below imports it anyway
import sys

from claude_sandbox.core import streams  # loaded already: the package's __init__ runs it
from claude_sandbox.core.errors import EXIT_USAGE, SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn


def _leave(status: int) -> NoReturn:
    """End a launch that has undone everything it made (run.launch's finally blocks).

    The interpreter's own finalisation would then free every module and object one by
    one: about 3 ms of CPU at the end of every launch, on its critical path (ADR 0004),
    for nothing of ours. The launch registers no exit handlers; its files and descriptors
    are closed by its steps or go with the process. What the standard streams buffer is
    written first (core/streams.py).
    """
    streams.flush()
    os._exit(status)


def _launch(agent: str, command: tuple[str, ...] | None, args: tuple[str, ...]) -> NoReturn:
    """A launch, set up with the cyclic garbage collector off.

    Its imports and its set-up make little cyclic garbage, and the collector's passes
    over them cost about 2.6 ms of CPU a launch before the session starts, on its
    critical path (docs/adr/0004-launch-cost.md). steps.py turns it back on once the
    session has ended, with what the launch made until then frozen; the egress proxy,
    the one fork that serves through the session, does the same at its start
    (egressstart.py). The holder and the late-mount helper, forks too, keep it off:
    they set up and wait, then exec or end.
    """
    gc.disable()
    from claude_sandbox.launch import run

    _leave(run.launch(run.Request(agent, command, args), os.environ))


def _internal(command: str, argv: list[str]) -> int:
    # `_shadow`: what shims from before the package's folders call. An upgrade replaces
    # the package before the shims, and a launch in between must still work.
    if command in ("_launch", "_shadow"):
        if "--" not in argv:
            raise SandboxError(f"{command}: expected `--` before the program's arguments",
                               EXIT_USAGE)
        index = argv.index("--")
        if index != 1:
            raise SandboxError(f"{command}: expected exactly one agent name", EXIT_USAGE)
        args = tuple(argv[2:])
        from claude_sandbox.launch import quick  # the root-owned program alone (check 94)

        found = quick.program(argv[0], args)
        if found is not None:
            return quick.answer(found, args, os.environ)
        _launch(argv[0], None, args)
    if command == "_enter":
        from claude_sandbox.inside import enter

        return enter.main(argv)
    if command == "_janitor":
        from claude_sandbox.launch.session import janitor

        return janitor.main(argv)
    raise SandboxError(f"unknown internal command {command}", EXIT_USAGE)


def _plain_shell(rest: list[str]) -> tuple[str, tuple[str, ...]] | None:
    """`shell [--agent NAME] [--] [CMD ...]` without argparse (a launch path); None otherwise.

    Anything else (--help, a bad option) goes to cli.py, whose argparse owns the
    documented behaviour; both read the same words the same way.
    """
    agent = os.environ.get("CLAUDE_SANDBOX_AGENT", "claude")
    if rest[:1] == ["--agent"] and len(rest) >= 2 and not rest[1].startswith("-"):
        agent, rest = rest[1], rest[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    elif rest and rest[0].startswith("-"):
        return None
    return agent, tuple(rest) or ("bash",)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0].startswith("_"):
            return _internal(args[0], args[1:])
        if args and args[0] == "shell":
            fast = _plain_shell(args[1:])
            if fast is not None:
                _launch(*fast, ())
        from claude_sandbox import cli

        return cli.main(args)
    except SandboxError as error:
        sys.stderr.write(f"claude-sandbox: {error.message}\n")
        return error.status
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
