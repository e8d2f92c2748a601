"""Render docs/reference/{verification-checks,configuration,mounts}.md from the code, and
README.md's table of exit statuses (core/errors.EXIT_STATUSES, which `--help` shows too).

The pages are committed; `--check` renders into memory and fails, naming the
page, when a committed one differs (tests/verification/test_render.py runs it).
The mounts page renders the launch plan (launch/planner/plan.py) made from fixed,
representative facts, so it does not depend on the machine that renders it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from claude_sandbox.core import errors, paths
from claude_sandbox.launch.configure import config, keys, profiles
from claude_sandbox.launch.facts.gather import Gathered
from claude_sandbox.launch.facts.hostfacts import GuardEntry, HostFacts
from claude_sandbox.launch.overlay import controlfiles
from claude_sandbox.launch.overlay.gitrepo import Repository
from claude_sandbox.launch.planner import limits, plan, render
from claude_sandbox.launch.planner.mounts import Writable
from claude_sandbox.launch.session import state

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "docs" / "templates"
REFERENCE = REPO / "docs" / "reference"
HOME = "/home/dev"
WORKSPACE = "/workspaces/project"
FACTS_NOTE = (f"uid 1000, $HOME {HOME}, launched in {WORKSPACE} (a git repository with a "
              ".vscode directory), with ~/.config/gh, uv, /run/user and the docker socket "
              "present, a user venv ahead of /usr/local/bin, the egress jail on")


def representative_facts(profile: profiles.Profile) -> HostFacts:
    existing = frozenset({
        "/var/run/docker.sock", "/run/user",
        *(f"{HOME}/{rel}" for rel in (".config/gh", ".local/bin/uv", ".local/bin/uvx")),
    })
    binary = f"{paths.AGENTS_PREFIX}/bin/{profile.name}"
    guard = tuple(GuardEntry(f"{HOME}/.cache/venv/bin", name, "absent")
                  for name in profiles.ENTRY_POINTS)
    return HostFacts(
        uid=1000, gid=1000, user="dev", home=HOME, cwd=WORKSPACE,
        path=(f"{HOME}/.cache/venv/bin", "/usr/local/bin", "/usr/bin", "/bin"),
        existing=existing, real_binary=binary, real_root=binary, guard=guard,
        agent_tmp=profile.tmp_dir,
        root_entries=(("bin", "usr/bin"), ("etc", None), ("home", None), ("lib", "usr/lib"),
                      ("opt", None), ("root", None), ("srv", None), ("usr", None), ("var", None),
                      ("work", None)),
        store_home=state.agent_home(f"{HOME}/{state.DEFAULT_RELATIVE}", profile.name),
    )


def representative_layout() -> Writable:
    """A workspace that is a git repository with a .vscode directory and a .mcp.json file."""
    present = {f"{WORKSPACE}/{rel}": kind for rel, kind in ((".vscode", "dir"),
                                                            (".mcp.json", "file"))}
    table = controlfiles.controls((), ())
    kinds = {path: present.get(path) for path in controlfiles.candidates(WORKSPACE, table, ())}
    repos = (Repository(f"{WORKSPACE}/.git", WORKSPACE, "the workspace's .git"),)
    return Writable(WORKSPACE, (), (controlfiles.plan(WORKSPACE, table, (), kinds),), repos)


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=False, autoescape=False)
    env.filters["cell"] = _cell
    return env


def pages() -> dict[str, str]:
    import yaml

    env = _environment()
    catalogue = yaml.safe_load((REPO / "verification" / "checks.yaml").read_text())
    plans = []
    for profile in profiles.PROFILES:
        facts = representative_facts(profile)
        gathered = Gathered(facts=facts, layout=representative_layout(),
                            command=(facts.real_binary,), gitconfig="", codex_config="",
                            resolv_conf="", host_addresses=(), keep_ignored=(), environ=())
        none = limits.LimitPlan((), (), ())
        made = plan.make(profile, config.Config(), gathered, none)
        views = [(view.target, view.store.replace(made.workspace_store, "STORE"), view.reason)
                 for view in made.views]
        plans.append((profile.name, render.option_rows(made), views))
    return {
        "verification-checks.md": env.get_template("verification-checks.md.j2").render(
            checks=catalogue["checks"], adversarial=catalogue.get("adversarial", [])),
        "configuration.md": env.get_template("configuration.md.j2").render(
            keys=keys.KEYS, denied_names=sorted(keys.DENIED_NAMES),
            denied_prefixes=keys.DENIED_PREFIXES, config_file=paths.CONFIG_FILE),
        "mounts.md": env.get_template("mounts.md.j2").render(
            plans=plans, facts_note=FACTS_NOTE,
            late=plan.late_masks(0, proc_mountable=False, noexec=True)),
    }


README = REPO / "README.md"
_OPEN = ("<!-- exit-statuses: rendered from core/errors.py by python -m "
         "claude_sandbox.tools.render -->")
_CLOSE = "<!-- /exit-statuses -->"


def readme(text: str) -> str:
    """README.md with the exit statuses between its two markers rendered anew."""
    start, end = text.index(_OPEN) + len(_OPEN), text.index(_CLOSE)
    rows = "\n".join(f"| {status} | {meaning} |" for status, meaning in errors.EXIT_STATUSES)
    table = (f"\nExit statuses of claude-sandbox itself:\n\n| status | meaning |\n|---|---|\n"
             f"{rows}\n\n{errors.OTHER_STATUS}\n")
    return text[:start] + table + text[end:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m claude_sandbox.tools.render")
    parser.add_argument("--check", action="store_true",
                        help="fail when a committed page differs from its rendering")
    options = parser.parse_args(argv)
    drift = []
    for name, text in pages().items():
        target = REFERENCE / name
        if options.check:
            current = target.read_text() if target.exists() else None
            if current != text:
                drift.append(str(target.relative_to(REPO)))
        else:
            REFERENCE.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    current = README.read_text()
    if readme(current) != current:
        if options.check:
            drift.append(str(README.relative_to(REPO)))
        else:
            README.write_text(readme(current))
    if drift:
        print(f"render: out of date (run python -m claude_sandbox.tools.render): "
              f"{', '.join(drift)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
