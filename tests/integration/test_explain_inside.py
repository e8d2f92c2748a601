"""`explain --json` lists what the agent gets, checked against what it sees from inside.

Every mount point of the sandbox is either a mount, a late mask or an overlay
`explain --json` lists, or a host mount point carried in with the tree a listed
bind shows; every mount it lists whose source exists is there inside. The writable places
it lists for Landlock take a file, and a system tree does not.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.integration.conftest import SHIM_DIR, Launcher

NOT_MOUNTS = ("symlink", "remount-ro")
WRITE_PROBE = r"""
import json, os, sys
result = {}
for place in json.loads(sys.argv[1]):
    path = os.path.join(place, f".csbx-explain-{os.getpid()}")
    try:
        with open(path, "w") as handle:
            handle.write("x")
        os.unlink(path)
        result[place] = "written"
    except OSError as error:
        result[place] = error.strerror
print(json.dumps(result))
"""


# The jail on, with a brokered credential: the broker's trust bundle is bound too.
JAILED = {"env": {"CLAUDE_SANDBOX_EGRESS_JAIL": "1", "GH_TOKEN": "ghp_" + "e" * 36},
          "config": "credential = GH_TOKEN\n"}


def _explained(launcher: Launcher, **how: object) -> dict[str, object]:
    result = launcher.run([f"{SHIM_DIR}/claude-sandbox", "explain", "--json", "--",
                           "/bin/cat", "/proc/self/mountinfo"], **how)  # type: ignore[arg-type]
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _points(mountinfo: str) -> set[str]:
    return {line.split()[4].replace("\\040", " ") for line in mountinfo.splitlines() if line}


def _host_points() -> set[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        return _points(handle.read())


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


@pytest.mark.parametrize("jailed", [False, True], ids=["jail-off", "jail-and-broker"])
def test_every_mount_inside_is_one_explain_lists(launcher: Launcher, jailed: bool) -> None:
    how = JAILED if jailed else {}
    explained = _explained(launcher, **how)
    inside = launcher.shell("/bin/cat", "/proc/self/mountinfo", **how)
    assert inside.returncode == 0, inside.stderr
    points = _points(inside.stdout)
    mounts = [m for m in explained["mounts"] if m["kind"] not in NOT_MOUNTS]  # type: ignore[index,union-attr]
    listed = {m["dest"] for m in mounts}
    late = explained["late_masks"]  # type: ignore[index]
    listed |= set(late["root_only"])  # type: ignore[index]
    listed |= {view["target"] for view in explained["views"]}  # type: ignore[index,union-attr]
    binds = [m["dest"] for m in mounts if m["kind"] in ("ro-bind", "bind", "ro-bind-try")]
    host = _host_points()
    if "config" in how:  # the test's own file, bound over the operator's for this launch
        host.add("/etc/claude-sandbox.conf")
    unexplained = sorted(
        point for point in points - listed - {"/"}
        # a host mount point inside a tree a listed bind shows comes in with it (rbind)
        if not (point in host and any(_under(point, top) for top in binds))
        # what bwrap's own /dev and /proc hold (devpts, mqueue), and the outer tasks'
        # /proc/PID covers where the engine masks /proc
        and not point.startswith(("/dev/", "/proc/")))
    assert not unexplained, unexplained
    absent = sorted(m["dest"] for m in mounts
                    if m["dest"] not in points
                    and (m["kind"] in ("tmpfs", "data", "proc", "dev")
                         or os.path.lexists(m["source"])))
    assert not absent, absent
    if launcher.user == "root":  # root's own files: refused by a view, or else covered
        viewed = late["root_only_views"]  # type: ignore[index]
        assert "/usr" in viewed, late
        assert any(_under("/etc/shadow", top) for top in viewed) or (
            "/etc/shadow" in late["root_only"]), late  # type: ignore[index]
    if jailed:  # the trust bundle with the broker's CA, as the launch binds it
        assert any(m["kind"] == "data" and "trust" in m["source"] for m in mounts), mounts


def test_the_writable_places_explain_lists_take_a_file_and_a_system_tree_does_not(
        launcher: Launcher) -> None:
    explained = _explained(launcher)
    writable = explained["kernel_layers"]["landlock"]["writable"]  # type: ignore[index]
    probe = launcher.shell("/usr/bin/python3", "-c", WRITE_PROBE,
                           json.dumps([*writable, "/usr", "/etc"]))
    assert probe.returncode == 0, probe.stderr
    result = json.loads(probe.stdout)
    refused = {place: why for place, why in result.items()
               if place in writable and why != "written"}
    assert not refused, refused
    assert result["/usr"] != "written" and result["/etc"] != "written", result


# The rows that depend on the jail's own addresses, which explain shows for pasta's usual
# ones: compared by class, not by address.
OWN_LINK = "connected or copied subnet of the outer container"
IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "/sbin/ip"


def _routes(text: str) -> set[tuple[str, str]]:
    """(type, destination) of each route `ip -o route` printed; ip prints a host route
    without its /32."""
    def cidr(dst: str) -> str:
        return "0.0.0.0/0" if dst == "default" else dst if "/" in dst else f"{dst}/32"

    found = set()
    for line in text.splitlines():
        words = line.split()
        if words and words[0] in ("blackhole", "unreachable", "prohibit", "throw"):
            found.add((words[0], cidr(words[1])))
        elif words:
            found.add(("unicast", cidr(words[0])))
    return found


def test_the_jails_routes_are_the_ones_explain_lists(launcher: Launcher) -> None:
    env = {"CLAUDE_SANDBOX_EGRESS_JAIL": "1"}
    explained = _explained(launcher, env=env)
    inside = launcher.shell(IP, "-4", "-o", "route", "show", "table", "main", env=env)
    assert inside.returncode == 0, inside.stderr
    seen = _routes(inside.stdout)
    rows = [(row["type"], row["dst"], row["why"], row["required"])  # type: ignore[index]
            for row in explained["routes"]]  # type: ignore[union-attr]
    listed = {(kind, dst) for kind, dst, why, _ in rows if why != OWN_LINK}
    required = {(kind, dst) for kind, dst, why, needed in rows if needed and why != OWN_LINK}
    assert required <= seen, sorted(required - seen)
    # Nothing refused inside that explain does not list, but the jail's own link's rows
    # (as many as explain lists, for the address pasta chose).
    refused = {(kind, dst) for kind, dst in seen - listed if kind != "unicast"}
    own = [row for row in rows if row[2] == OWN_LINK]
    assert len(refused) <= len(own), sorted(refused)
