"""The package's folders follow where code runs, and the import rules between them hold.

The rules are written down in docs/explanation/architecture.md ("Folders and
import rules"); this test reads every module's imports (static and function-
level alike) and fails on an arrow the rules do not allow.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "claude_sandbox"
# Which folders each folder may import. `core` is shared by every process context;
# the inner stage and the jail's processes need nothing of the launcher's; the
# launcher starts the jail and writes what the inner stage reads; the operator
# tools may read anything. The package's face (`__main__`, `cli`) dispatches.
ALLOWED = {
    "core": {"core"},
    "inside": {"core", "inside"},
    "jail": {"core", "jail"},
    "launch": {"", "core", "launch", "jail", "inside"},  # "": the version explain names
    "install": {"", "core", "install", "launch"},  # "": the package's version
    "tools": {"core", "inside", "jail", "launch", "install", "tools", ""},
    "": {"", "core", "launch", "jail", "inside", "install"},
}
# launch/ by stage (docs/explanation/architecture.md, "The launcher's stages"): the
# modules that order the stages sit at its top, every other module in its stage's folder.
LAUNCH_TOP = {"__init__", "run", "steps", "configured", "decide", "making", "explain", "quick"}
STAGES = {"configure", "facts", "planner", "session", "overlay"}
# What a stage may take from another stage beyond the rule: the configuration checks a
# credential line with the credential table's parser; the planner's caps are rows of
# the cgroup's records.
STAGE_EXCEPTIONS = {
    "configure": {"facts.credentials"},
    "planner": {"session.cgroups"},
}
MAX_LINES = 400  # a module a reviewer reads in one sitting
CORE = ("core", "launch", "jail", "inside")  # the launch path; tools and the installer are not


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else ""


def _imports(path: Path) -> set[str]:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    here = ".".join(relative.parts)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: -node.level]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("claude_sandbox.")}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_lives_in_a_folder_by_process_context() -> None:
    loose = {p.name for p in PACKAGE.glob("*.py")}
    assert loose == {"__init__.py", "__main__.py", "cli.py"}
    folders = {p.name for p in PACKAGE.iterdir()
               if p.is_dir() and not p.name.startswith(("_", "."))}
    assert folders == {name for name in ALLOWED if name}


def test_imports_between_folders_follow_the_rules() -> None:
    folders = {name for name in ALLOWED if name}
    broken = []
    for path in _modules():
        relative = path.relative_to(PACKAGE)
        source = relative.parts[0] if len(relative.parts) > 1 else ""
        for name in _imports(path):
            target = name.split(".")[1]
            folder = target if target in folders else ""
            if folder not in ALLOWED[source]:
                broken.append(f"{relative} imports {name}")
    assert not broken, broken


def _launch_imports() -> list[tuple[str, str, str]]:
    """(stage or "", module, imported launch module relative to launch/), for launch/."""
    found = []
    for path in sorted((PACKAGE / "launch").rglob("*.py")):
        relative = path.relative_to(PACKAGE / "launch")
        stage = relative.parts[0] if len(relative.parts) > 1 else ""
        for name in _imports(path):
            if name.startswith("claude_sandbox.launch."):
                found.append((stage, str(relative), name.removeprefix("claude_sandbox.launch.")))
    return found


def test_the_launcher_is_split_by_stage() -> None:
    launch = PACKAGE / "launch"
    assert {p.stem for p in launch.glob("*.py")} == LAUNCH_TOP
    assert {p.name for p in launch.iterdir() if p.is_dir() and p.name != "__pycache__"} \
        == STAGES


def test_a_stage_never_reaches_back_to_the_modules_that_order_the_stages() -> None:
    broken = [f"{module} imports {name}" for stage, module, name in _launch_imports()
              if stage and name.split(".")[0] in LAUNCH_TOP]
    assert not broken, broken


def test_the_configuration_and_the_planner_take_only_what_the_rules_name() -> None:
    # The configuration reads no fact; the planner runs no part of the session (and
    # tests/unit/test_planner_reads_nothing.py proves it reads nothing of the host).
    others = {"configure": STAGES - {"configure"}, "planner": {"session"}}
    broken = []
    for stage, module, name in _launch_imports():
        target = ".".join(name.split(".")[:2])
        if stage in others and name.split(".")[0] in others[stage] \
                and target not in STAGE_EXCEPTIONS.get(stage, set()):
            broken.append(f"{module} imports {name}")
    assert not broken, broken


def test_no_launch_path_module_is_over_the_reading_length() -> None:
    long = [f"{p.relative_to(PACKAGE)}: {n}" for p in _modules()
            if p.relative_to(PACKAGE).parts[0] in CORE
            and (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, long


def test_no_module_of_the_package_is_over_the_reading_length() -> None:
    # The installer and the operator tools too: each was split by job once it grew.
    long = [f"{p.relative_to(PACKAGE)}: {n}" for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, long


def test_no_comment_cites_a_file_that_is_not_in_the_repository() -> None:
    # The design record is docs/adr and docs/explanation; these names are not in the repo.
    outside = ("DESIGN", "FACTS.md", "STYLE.md", "COMPAT", "seed 0", "seeds/")
    cited = [f"{p.relative_to(PACKAGE)}: {word}" for p in _modules()
             for word in outside if word in p.read_text()]
    assert not cited, cited
