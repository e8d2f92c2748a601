"""core/unowned.py on this kernel, as root: a view made by the id that owns nothing lets
uid 0 read what others may read and nothing root keeps from them, whenever it was made
(ADR 0020). Attached in a forked child's own mount namespace; read by uid 0 without a
capability, as a root launch's agent is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

from claude_sandbox.core import unowned, viewplaces

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="views are a root launch's")

# A directory is read by listing it, anything else by reading its bytes.
READ = ("for f in \"$@\"; do if [ -d \"$f\" ]; then r=ls; else r=cat; fi; "
        "if $r \"$f\" >/dev/null 2>&1; then echo \"read $f\"; else echo \"refused $f\"; fi; "
        "done")


@pytest.fixture
def tree() -> Iterator[str]:
    """A tree under /var/lib, as root made it: files and directories of every class."""
    top = tempfile.mkdtemp(prefix="csbx-views-", dir="/var/lib")
    os.chmod(top, 0o755)
    for name, mode in (("open", 0o644), ("own", 0o600), ("group", 0o640)):
        with open(os.path.join(top, name), "w") as handle:
            handle.write(name)
        os.chmod(os.path.join(top, name), mode)
    for name, mode in (("listed", 0o755), ("kept", 0o700)):
        os.mkdir(os.path.join(top, name), mode)
        with open(os.path.join(top, name, "inside"), "w") as handle:
            handle.write("inside")
        os.chmod(os.path.join(top, name, "inside"), 0o644)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def _outcomes(views: viewplaces.Views, fds: list[int], names: list[str], then: str = "",
              ) -> dict[str, str]:
    """In a process of its own (its own mount namespace): attach `views`, run `then` (a
    shell command, as root with every capability), and read each of `names` (relative to
    the first view) as uid 0 without a capability."""
    script = (
        "import os, sys, subprocess\n"
        "from claude_sandbox.core import kernel, viewplaces\n"
        "from claude_sandbox.core.libc import load_libc\n"
        "libc = load_libc()\n"
        "assert libc.unshare(kernel.CLONE_NEWNS) == 0\n"
        "assert libc.mount(b'none', b'/', None, kernel.MS_REC | kernel.MS_PRIVATE, None) == 0\n"
        f"views = viewplaces.Views({views.roots!r})\n"
        f"failed = viewplaces.attach_all(views, {fds!r})\n"
        "assert failed is None, failed\n"
        f"subprocess.run(['sh', '-c', {then!r} or ':'], check=True)\n"
        "os.execvp('setpriv', ['setpriv', '--inh-caps=-all', '--bounding-set=-all', 'sh', "
        f"'-c', {READ!r}, 'sh', *(f'{{viewplaces.STAGING}}/0/{{n}}' for n in {names!r})])\n")
    # -S: this checkout by PYTHONPATH, whatever an editable install maps the package to.
    result = subprocess.run([sys.executable, "-S", "-c", script], capture_output=True, text=True,
                            check=False, pass_fds=fds, env={"PYTHONPATH": _REPO})
    found = {}
    for line in result.stdout.splitlines():
        verdict, _, path = line.partition(" ")
        found[path.split("/0/", 1)[-1]] = verdict
    assert found, result.stdout + result.stderr
    return found


_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _made(trees: list[str]) -> tuple[viewplaces.Views, list[int]]:
    views = viewplaces.Views(tuple(trees))
    made = unowned.make(views.roots)
    assert not isinstance(made, str), made
    for fd in made:
        os.set_inheritable(fd, True)
    return views, made


def test_uid_0_reads_what_others_may_and_nothing_root_keeps(tree: str) -> None:
    views, fds = _made([tree])
    try:
        assert _outcomes(views, fds, ["open", "own", "group", "listed/inside", "kept",
                                      "kept/inside"]) == {
            "open": "read", "own": "refused", "group": "refused", "listed/inside": "read",
            "kept": "refused", "kept/inside": "refused"}
    finally:
        for fd in fds:
            os.close(fd)


def test_a_file_root_makes_after_the_view_is_attached_and_a_link_to_it_are_refused(
        tree: str) -> None:
    views, fds = _made([tree])
    later = os.path.join(tree, "later")
    then = (f"umask 077; echo secret > {later}; ln {later} {tree}/linked; "
            f"mkdir -m 0755 {tree}/new")
    try:
        assert _outcomes(views, fds, ["later", "linked", "new"], then) == {
            "later": "refused", "linked": "refused", "new": "read"}
    finally:
        for fd in fds:
            os.close(fd)


def test_a_tree_below_a_directory_only_root_may_search_is_shown(tree: str) -> None:
    """A toolchain of root's home: /root is 0700, and the mounter names the tree by a
    descriptor it opened while it was still root's uid."""
    inner = os.path.join(tree, "kept", "tool")
    os.mkdir(inner, 0o755)
    os.rename(os.path.join(tree, "kept", "inside"), os.path.join(inner, "inside"))
    views, fds = _made([inner])
    try:
        assert _outcomes(views, fds, ["inside"]) == {"inside": "read"}
    finally:
        for fd in fds:
            os.close(fd)


def test_what_overlayfs_refuses_is_said() -> None:
    assert unowned.make(["/proc"]) == "/proc: overlayfs refuses it: Invalid argument"
    assert unowned.make(["/nonexistent-csbx"]) == "/nonexistent-csbx: No such file or directory"


def test_a_tree_with_a_mount_below_it_is_refused_a_view(tree: str) -> None:
    """Why such a tree is left to the walk (viewplaces.split): in the mounter's namespace the
    mount below is locked, and overlayfs will not take a layer it would uncover."""
    script = (
        "import os, subprocess\n"
        "from claude_sandbox.core import kernel, unowned\n"
        "from claude_sandbox.core.libc import load_libc\n"
        "libc = load_libc()\n"
        "assert libc.unshare(kernel.CLONE_NEWNS) == 0\n"
        "assert libc.mount(b'none', b'/', None, kernel.MS_REC | kernel.MS_PRIVATE, None) == 0\n"
        f"subprocess.run(['mount', '--bind', '/dev/null', {tree!r} + '/open'], check=True)\n"
        f"print(unowned.make([{tree!r}]))\n")
    result = subprocess.run([sys.executable, "-S", "-c", script], capture_output=True,
                            text=True, check=False, env={"PYTHONPATH": _REPO})
    assert result.stdout.strip() == f"{tree}: overlayfs refuses it: Invalid argument", (
        result.stdout + result.stderr)


def test_the_mounter_holds_nothing_of_the_launchers_but_its_socket() -> None:
    """Forked from the launcher while the jail's channel is open: that end and whatever
    the launcher inherited are closed in the mounter (check 102's rule), so that an end
    the launcher closes is closed."""
    extra = os.open("/dev/null", os.O_RDONLY)
    mounter = unowned.start()
    try:
        assert mounter.ready() is None  # its user namespace made, and mapped
        held = sorted(int(name) for name in os.listdir(f"/proc/{mounter.pid}/fd"))
        assert len(held) == 4 and held[:3] == [0, 1, 2], held  # and its socket
        assert os.readlink(f"/proc/{mounter.pid}/fd/{held[3]}").startswith("socket:")
    finally:
        os.close(extra)
        mounter.stop()


def test_an_answered_mounter_is_gone_once_stopped_and_a_stopped_one_answers_why(
        tree: str) -> None:
    """The launch does not wait for the mounter's exit when it answers (its namespaces'
    teardown); `stop`, as the launch ends, reaps it: no process is left. A mounter
    stopped before it was asked makes no view and says so."""
    mounter = unowned.start()
    made = mounter.views([tree])
    assert not isinstance(made, str), made
    for fd in made:
        os.close(fd)
    pid = mounter.pid
    mounter.stop()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    stopped = unowned.start()
    pid = stopped.pid
    stopped.stop()
    assert stopped.views([tree]) == "the mounter was stopped"
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
