"""Reads by inversion: the plan shows the system trees of / and nothing else (check 72)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from claude_sandbox.core.record import replace
from claude_sandbox.launch.facts.hostfacts import path_facts
from claude_sandbox.launch.planner import reads
from claude_sandbox.launch.planner.mounts import Writable
from tests.unit.test_plan import build, facts

ROOT = (("bin", "usr/bin"), ("boot", None), ("etc", None), ("home", None),
        ("lib", "usr/lib"), ("media", None), ("mnt", None), ("opt", None), ("root", None),
        ("srv", None), ("usr", None), ("var", None), ("work", None), ("data-volume", None))


def _dests(host: object) -> dict[str, str]:
    the_plan = build(host=host)  # type: ignore[arg-type]
    return {m.dest: m.kind for m in the_plan.mounts}


def test_only_the_system_trees_of_root_are_shown() -> None:
    shown = _dests(replace(facts(), root_entries=ROOT))
    assert shown["/"] == "remount-ro"  # bubblewrap's own root, read-only; / is not bound
    for tree in ("/usr", "/etc", "/opt", "/var"):
        assert shown[tree] == "ro-bind", tree
    for hidden in ("/home", "/root", "/srv", "/mnt", "/media", "/boot", "/work",
                   "/data-volume"):
        assert hidden not in shown, hidden


def test_merged_usr_links_stay_links() -> None:
    the_plan = build(host=replace(facts(), root_entries=ROOT))
    links = {m.dest: m.source for m in the_plan.mounts if m.kind == "symlink"}
    assert links == {"/bin": "usr/bin", "/lib": "usr/lib"}


def test_a_tree_by_another_name_is_not_shown_whatever_it_holds() -> None:
    assert reads.system_entries((("workspaces", None), ("code", None), ("app", None))) == []


def test_a_socket_in_a_hidden_tree_gets_no_cover_that_would_name_it() -> None:
    host = replace(facts(), root_entries=ROOT, sockets=("/srv/app/app.sock",
                                                        "/opt/app/app.sock"))
    shown = _dests(host)
    assert "/opt/app/app.sock" in shown
    assert "/srv/app/app.sock" not in shown


def test_the_sandbox_root_is_made_read_only_after_every_mount() -> None:
    the_plan = build(host=replace(facts(), root_entries=ROOT))
    assert the_plan.mounts[-1].kind == "remount-ro" and the_plan.mounts[-1].dest == "/"


@pytest.fixture
def elsewhere() -> Iterator[Path]:
    """A directory outside /tmp (the sandbox's own), in a tree the test's / does not show."""
    path = Path(tempfile.mkdtemp(prefix="csbx-reads-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


NO_VAR = tuple(e for e in ROOT if e[0] != "var")


def test_path_directories_elsewhere_come_back_only_as_bin_directories(elsewhere: Path) -> None:
    for name in ("go/bin", "tools/sbin", "secrets"):
        (elsewhere / name).mkdir(parents=True)
    path = (f"{elsewhere}/go/bin", f"{elsewhere}/tools/sbin", f"{elsewhere}/secrets",
            "/tmp/bin", "relative/bin", "/usr/bin")
    host = replace(facts(), root_entries=NO_VAR, runtime_dirs=("/run",), **path_facts(path))
    layout = Writable("/work/project", path_readable=tuple(p for p in path
                                                           if p.startswith("/")))
    assert reads.path_outside(host, layout) == [f"{elsewhere}/go/bin",
                                                f"{elsewhere}/tools/sbin"]


def test_a_path_directory_the_rules_refuse_stays_out(elsewhere: Path) -> None:
    (elsewhere / "bin").mkdir()
    host = replace(facts(), root_entries=NO_VAR, runtime_dirs=("/run",),
                   **path_facts((f"{elsewhere}/bin",)))
    assert reads.path_outside(host, Writable("/work/project", path_readable=())) == []


def test_a_socket_under_allow_read_is_covered_after_the_bind_that_shows_it() -> None:
    from claude_sandbox.launch.configure import profiles
    from claude_sandbox.launch.configure.config import Config
    from claude_sandbox.launch.planner import mounts

    host = replace(facts(), root_entries=ROOT, sockets=("/srv/shared/app.sock",))
    layout = Writable("/work/project", allow_read=("/srv/shared",))
    made = mounts.build(profiles.get("claude"), Config(egress_jail=False), host, layout,
                        codex_config=False, jailed=False)
    dests = [m.dest for m in made]
    assert dests.index("/srv/shared") < dests.index("/srv/shared/app.sock")
