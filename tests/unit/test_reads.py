"""Reads by inversion: the plan shows the system trees of / and nothing else (check 72)."""

from __future__ import annotations

from claude_sandbox.core.record import replace
from claude_sandbox.launch import reads
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
