"""`claude-sandbox`: the person-facing subcommands."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence

from . import __version__, bwrap, config, paths, profiles, shadow
from .errors import EXIT_STATUSES, EXIT_UNAVAILABLE, EXIT_USAGE, SandboxError

DESCRIPTION = """\
A launch-time sandbox for AI coding agents. `claude`, `codex` and `pi` run
their real program inside bubblewrap and a per-launch network namespace;
this command inspects and exercises that sandbox."""

EPILOG = (
    "exit statuses of claude-sandbox itself:\n"
    + "\n".join(f"  {status}  {meaning}" for status, meaning in EXIT_STATUSES)
    + "\nOtherwise the status is the program's own (128+N when a signal N ended it)."
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
        description="Print the bubblewrap command line an agent's launch would use, one mount "
        "or setting per line with the reason it is there, then the environment "
        "(pass-env values hidden) and the egress jail's route plan. Starts nothing.",
    )
    explain.add_argument("--agent", default=None, help=agent_help)

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
        "--quick", action="store_true",
        help="do not start the real agents outside for check 54 (faster; 54 then covers "
        "only the refusals inside)",
    )
    return parser


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    options = parser.parse_args(list(argv))
    if options.command is None:
        parser.print_help()
        return EXIT_USAGE
    if options.command == "version":
        print(f"claude-sandbox {__version__}")
        return 0
    if options.command == "shell":
        return _shell(options.agent or _agent_default(), options.cmd)
    if options.command == "state":
        return _state(options.action, options.agent, options.yes)
    if options.command == "explain":
        print(explain(options.agent or _agent_default()))
        return 0
    return _operator_tool(options.command, list(argv[1:]))


def _shell(agent: str, cmd: list[str]) -> int:
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    command = tuple(cmd) if cmd else ("bash",)
    return shadow.launch(shadow.Request(agent, command, ()), os.environ)


def _state(action: str, agent: str | None, yes: bool) -> int:
    import pwd

    from . import state

    uid = os.getuid()
    home = os.path.realpath(pwd.getpwuid(uid).pw_dir)
    names = [agent] if agent else (list(profiles.AGENT_NAMES) if action == "show"
                                    else [_agent_default()])
    chosen = [profiles.get(name) for name in names]
    cfg = shadow.load_config(chosen[0].name, os.environ)
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


def explain(agent: str) -> str:
    profile = profiles.get(agent)
    cfg = shadow.load_config(profile.name, os.environ)
    facts = shadow.probe(profile, cfg, os.environ, dry_run=True)
    extras = bwrap.Extras(
        gitconfig_fd=3,
        seccomp_fd=None,
        jailed=cfg.egress_jail,
        resolv_conf="JAIL/resolv.conf" if cfg.egress_jail else None,
    )
    from . import limits, seccomp

    limit_plan = limits.plan_limits(
        cfg.max_pids, cfg.max_memory, limits.probe_cgroups(), os.getuid()
    )
    plan = shadow.with_enter(
        shadow.plan_for(
            profile, cfg, shadow.Request(profile.name, None, ()), facts, os.environ, extras
        ),
        cfg,
        limit_plan,
        hide_fd=4 if not facts.proc_mountable else None,
    )
    lines = [
        f"# claude-sandbox {__version__}: the sandbox for {profile.name}",
        f"# configuration: {paths.CONFIG_FILE}",
    ]
    for key, where in sorted(cfg.origins.items()):
        lines.append(f"#   {key} from {where}")
    lines.append(f"{paths.find_tool('bwrap') or 'bwrap'} \\")
    width = min(48, max(len(shlex.join(op.args)) for op in plan.ops))
    for op in plan.ops:
        lines.append(f"  {shlex.join(op.args):<{width}}  # {op.reason}")
    lines.append(f"  -- {shlex.join(plan.command)}")
    lines.append("# environment (the whole of it; pass-env values hidden):")
    for name, value in plan.env:
        shown = "<from the launching environment>" if name in cfg.pass_env else value
        lines.append(f"  {name}={shown}")
    lines.append(f"# kernel layers (hardening = {cfg.hardening}):")
    lines += [f"  {line}" for line in seccomp.describe(cfg.hardening)]
    kernel = limits.kernel_settings(cfg.hardening, limit_plan)
    lines += [f"  {line}" for line in limits.describe_kernel(kernel)]
    lines += [f"  {line}" for line in limits.describe(cfg.max_pids, cfg.max_memory, limit_plan)]
    lines += _explain_jail(cfg)
    return "\n".join(lines)


def _explain_jail(cfg: config.Config) -> list[str]:
    lines = []
    if cfg.egress_jail:
        lines.append("# egress jail: on (a per-launch network namespace; routes below)")
        from . import jail

        lines += [f"  {line}" for line in jail.explain_lines(cfg.allow_ip)]
    else:
        lines.append("# egress jail: OFF (egress-jail = 0): the container's network is shared")
    return lines


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
