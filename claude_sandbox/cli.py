"""`claude-sandbox`: the person-facing subcommands."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from claude_sandbox import __version__
from claude_sandbox.core import paths
from claude_sandbox.core.errors import (
    EXIT_REFUSED,
    EXIT_STATUSES,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    OTHER_STATUS,
    SandboxError,
)
from claude_sandbox.launch import run
from claude_sandbox.launch.configure import config, profiles

DESCRIPTION = """\
A launch-time sandbox for AI coding agents. `claude`, `codex` and `pi` run
their real program inside bubblewrap and a per-launch network namespace;
this command inspects and exercises that sandbox."""

EPILOG = (
    "exit statuses of claude-sandbox itself:\n"
    + "\n".join(f"  {status}  {meaning}" for status, meaning in EXIT_STATUSES)
    + "\n" + OTHER_STATUS
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise SandboxError(f"{message} (see `claude-sandbox --help`)", EXIT_USAGE)


def _agent_default() -> str:
    return os.environ.get("CLAUDE_SANDBOX_AGENT", "claude")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="claude-sandbox",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    agent_help = (
        f"the agent profile: {', '.join(profiles.AGENT_NAMES)} "
        "(default: $CLAUDE_SANDBOX_AGENT or claude)"
    )

    shell = sub.add_parser(
        "shell",
        help="run a command inside the sandbox an agent would get",
        description="Run CMD (default: bash) inside exactly the sandbox AGENT would get: "
        "the same mounts, environment, kernel layers and egress jail. Exits with "
        "CMD's status.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shell.add_argument("--agent", default=None, help=agent_help)
    shell.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- CMD [ARGS...]",
        help="the command to run (default: bash)",
    )

    explain = sub.add_parser(
        "explain",
        help="print the sandbox's command line with the reason for each part",
        description="Print the plan an agent's launch from here would run: the bubblewrap "
        "command line, one mount or setting per line with the reason it is there, the "
        "program the inner stage runs inside, the environment (pass-env values hidden), the "
        "descriptors' contents, the kernel layers and the egress jail's route plan; with "
        "--json also the late masks (on a root launch, the root-only files covered now) and "
        "the packet filter. The "
        "plan is made the way a launch makes it; its digest is the one a launch with "
        "CLAUDE_SANDBOX_TRACE=1 prints. Starts nothing, creates nothing.",
    )
    explain.add_argument("--agent", default=None, help=agent_help)
    explain.add_argument("--json", action="store_true",
                         help="print the whole plan as JSON (pass-env values hidden)")
    explain.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
        help="explain `claude-sandbox shell -- CMD` instead of the agent itself",
    )

    sub.add_parser("version", help="print the version", description="Print the version.")

    store = sub.add_parser(
        "state",
        help="show, import into or reset the agents' one-way state stores",
        description="Each agent's home inside the sandbox is a state store of its own, per "
        "user: its login, settings, caches and everything else it writes outside the "
        "workspace. Nothing outside reads it, and nothing in it ever flows back to your "
        "home. `show` prints where each store is; `import` copies your login and settings "
        "from your home into the store again (a first launch does it once); `reset` "
        "deletes a store, so the next launch starts from a fresh import.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    store.add_argument("action", nargs="?", choices=("show", "import", "reset"),
                       default="show", help="what to do (default: show)")
    store.add_argument("--agent", default=None,
                       help=f"the agent: {', '.join(profiles.AGENT_NAMES)} (default for show: "
                       "all; for import and reset: $CLAUDE_SANDBOX_AGENT or claude)")
    store.add_argument("--yes", action="store_true", help="reset without asking")

    _review_arguments(sub.add_parser(
        "review",
        help="show, apply or discard what review-mode sessions changed in the workspace",
        description=REVIEW_DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ))

    _log_arguments(sub.add_parser(
        "log",
        help="show what a session sent to the network: each connection and DNS query",
        description=LOG_DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ))

    doctor = sub.add_parser(
        "doctor",
        help="check that this host can run the sandbox, with fixes",
        description="Check every host fact the sandbox needs and print a row each, with the "
        "fix for each failing row. In a Kubernetes pod the fixes name the pod's settings "
        "(deploy/pod.yaml). Exit 0 only when every required row is ok.",
    )
    doctor_form = doctor.add_mutually_exclusive_group()
    doctor_form.add_argument("--json", action="store_true", help="print JSON instead of a table")
    doctor_form.add_argument("--plain", action="store_true",
                             help="the plain-text form: [ok|FAIL|warn] name: detail, and the "
                             "fix under each failing row")

    verify = sub.add_parser(
        "verify",
        help="run the numbered verification checks inside the real sandbox",
        description="Launch through the real shim and profile (no model), run the numbered "
        "checks inside, print PASS/FAIL/SKIP for each. Exit non-zero on any FAIL.",
    )
    verify.add_argument("--agent", default=None, help=agent_help)
    verify.add_argument("--json", action="store_true", help="print JSON")
    verify.add_argument("--junit", metavar="FILE", help="also write a JUnit XML report")
    verify.add_argument(
        "--plain", action="store_true", help="the plain-text form: [PASS] NN name, then a summary"
    )
    verify.add_argument(
        "--adversarial", action="store_true", help="also run the fixed escape attempts"
    )
    verify.add_argument(
        "--echo-host", nargs=2, metavar=("HOST", "OTHER"),
        help="for checks 85-87: a brokered credential's host and another allowed host, both "
        "served over TLS and HTTP by a server that answers each request with its head as "
        "JSON ({\"headers\": [\"Name: value\", ...]}); without it those checks skip",
    )
    verify.add_argument(
        "--quick", action="store_true",
        help="do not start the real agents outside for check 54 (faster; 54 then covers "
        "only the refusals inside)",
    )
    return parser


REVIEW_DESCRIPTION = (
    "With workspace-mode = review, an agent's sessions write an overlay of "
    "the workspace, and nothing reaches the real workspace until you apply it here. "
    "`show` (the default) lists each pending change with its class, what a program "
    "outside could run or follow first, and +/- line counts; `diff` prints unified "
    "diffs; `apply` writes the chosen changes into the workspace (never through a "
    "link; a FIFO, socket or device never; a git directory by rule: objects, refs, "
    "HEAD, index and allowed config, never hooks or includes); `discard` drops them. "
    "The workspace is workspace-root, or the current directory. PATH selects what is "
    "at or under it. A file you changed in the workspace since the session changed it "
    "is not overwritten without --force. Exit 1 when some chosen change could not be "
    "applied: it stays pending, and the line says why."
)


def _review_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The review subcommand's arguments; parsed intermixed (main), so that paths may
    follow options: `review apply --force a.txt`."""
    parser.add_argument("action", nargs="?", choices=("show", "diff", "apply", "discard"),
                        default="show", help="what to do (default: show)")
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="what to diff, apply or discard: at or under each path")
    parser.add_argument("--agent", default=None,
                        help=f"the agent: {', '.join(profiles.AGENT_NAMES)} (default: the "
                        "one with changes waiting)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", dest="every",
                       help="apply or discard every pending change")
    which.add_argument("-i", "--interactive", action="store_true",
                       help="apply: ask for each change (y, n, d for its diff, q)")
    parser.add_argument("--yes", action="store_true", help="discard --all without asking")
    parser.add_argument("--force", action="store_true",
                        help="apply: also over a file changed in the workspace since the "
                        "session changed it (by default it is not overwritten)")
    return parser


LOG_DESCRIPTION = """\
Show the egress record of a session in this workspace (workspace-root, or the
current directory): a row for each connection and DNS query the egress jail's
proxy saw, with its time (UTC), kind, verdict, name and port, the address it went
to, the bytes sent and received and the rule that decided; under each refused one,
the allow-domain line that would allow it; then the session's summary, and under
egress-policy = learn the lines that would allow the whole session.

The records live in your state store (state-dir; `claude-sandbox state show`
names it), one file a session: STORE/egress/WORKSPACE-KEY/SESSION.jsonl, one JSON
object a line. The launcher makes them outside the sandbox, where the agent
cannot write; but the names in them are what the agent sent, so they are printed
with control, non-printable and non-ASCII characters escaped. A workspace keeps
its newest 100 records, and at most 256 MiB of them: older ones are removed when
a session ends.

Exit 1 when this workspace has no record (no jailed session has run here), 64 for
an unknown --session."""


def _log_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--session", metavar="ID", default=None,
                       help="the session to show, by its id (its file name without .jsonl; "
                       "--list lists them); default: the newest")
    which.add_argument("--list", action="store_true", dest="listing",
                       help="list this workspace's sessions instead, newest last: id, agent, "
                       "policy, entries, refused")
    parser.add_argument("--agent", metavar="NAME", default=None,
                        help="only the sessions of this agent: "
                        f"{', '.join(profiles.AGENT_NAMES)} (default: any)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON document: {"session": the session line, '
                        '"entries": every other line}; with --list, the list as JSON')
    return parser


def _review_options(argv: Sequence[str]) -> argparse.Namespace:
    parser = _review_arguments(_Parser(prog="claude-sandbox review",
                                       description=REVIEW_DESCRIPTION))
    options = parser.parse_intermixed_args(list(argv))
    options.command = "review"
    return options


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    if list(argv[:1]) == ["review"] and not {"-h", "--help"} & set(argv[1:]):
        options = _review_options(argv[1:])
    else:
        options = parser.parse_args(list(argv))
    if options.command is None:
        parser.print_help()
        return EXIT_USAGE
    if options.command == "version":
        print(f"claude-sandbox {__version__}")
        return 0
    refusal = _inside_refusal(options.command)
    if refusal:
        raise SandboxError(refusal, EXIT_REFUSED)
    if options.command == "shell":
        return _shell(options.agent or _agent_default(), options.cmd)
    if options.command == "state":
        return _state(options.action, options.agent, options.yes)
    if options.command == "review":
        from claude_sandbox.launch.overlay import reviewcmd

        return reviewcmd.run(options.action, options.agent, options.paths,
                             every=options.every, interactive=options.interactive,
                             yes=options.yes, environ=os.environ, force=options.force)
    if options.command == "log":
        from claude_sandbox.launch.session import egresslog

        return egresslog.run(options.session, agent=options.agent, as_json=options.json,
                             listing=options.listing, environ=os.environ)
    if options.command == "explain":
        agent = options.agent or _agent_default()
        from claude_sandbox.launch import explain

        print(explain.explain(agent, _command(options.cmd), as_json=options.json))
        return 0
    return _operator_tool(options.command, list(argv[1:]))


def _inside_refusal(command: str) -> str | None:
    """Why `command` cannot run here, when this process is inside a sandbox already: the
    operator's commands read the host (doctor's fixes, verify's launches, the plan, the
    stores), and inside they would read the sandbox instead (ADR 0000 §7)."""
    from claude_sandbox.core.guard import inside_sandbox

    if not inside_sandbox():
        return None
    agent = os.environ.get("IS_SANDBOX_AGENT") or "an agent"
    return (f"{command}: this shell is inside {agent}'s sandbox already, where the host's "
            f"facts are not to be seen; run `claude-sandbox {command}` in the container's own "
            "shell, outside")


def _command(cmd: list[str]) -> tuple[str, ...] | None:
    """The words after `--`, or None where there are none."""
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    return tuple(cmd) or None


def _shell(agent: str, cmd: list[str]) -> int:
    command = _command(cmd) or ("bash",)
    return run.launch(run.Request(agent, command, ()), os.environ)


def _state(action: str, agent: str | None, yes: bool) -> int:
    import pwd

    from claude_sandbox.launch.session import state

    uid = os.getuid()
    home = os.path.realpath(pwd.getpwuid(uid).pw_dir)
    names = [agent] if agent else (list(profiles.AGENT_NAMES) if action == "show"
                                    else [_agent_default()])
    chosen = [profiles.get(name) for name in names]
    cfg = config.load(chosen[0].name, os.environ)
    root = state.store_root(cfg.state_dir, home, uid)
    if action == "show":
        for profile in chosen:
            path = state.agent_home(root, profile.name)
            there = "present" if os.path.isdir(path) else "not made yet (the first launch does)"
            print(f"{profile.name}: {path} ({there})")
        return 0
    profile = chosen[0]
    if action == "import":
        fresh = not os.path.isdir(state.agent_home(root, profile.name))
        path = state.ensure_home(root, profile.name, home, profile.imports, uid,
                                 default_root=cfg.state_dir is None)
        if not fresh:  # a new store was just filled by the same import
            for line in state.import_into(home, path, profile.imports) or ["nothing to import"]:
                print(line)
        return 0
    if not yes:
        raise SandboxError(
            f"state reset deletes {os.path.join(root, profile.name)} with {profile.name}'s "
            "login and everything it kept; run it again with --yes", EXIT_USAGE)
    removed = state.reset(root, profile.name)
    print(f"{profile.name}: {'removed' if removed else 'there was no store'} "
          f"({os.path.join(root, profile.name)})")
    return 0


def _operator_tool(command: str, argv: list[str]) -> int:
    """doctor and verify live in the tools tier: hand over to its venv."""
    python = os.path.join(paths.TOOLS_VENV, "bin", "python")
    if not os.access(python, os.X_OK):
        raise SandboxError(
            f"{command} needs the operator tools venv at {paths.TOOLS_VENV}; "
            "run the installer (see README)",
            EXIT_UNAVAILABLE,
        )
    os.execv(python, [python, "-I", "-m", f"claude_sandbox.tools.{command}", *argv])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
