"""What a root launch hides, decided by the owner's modes; the cache's refresh."""

from __future__ import annotations

import os
import shutil
import stat
import time

import pytest

from claude_sandbox.launch.facts import rootcache, rootmemo, rootonly

ROOT_GROUPS = frozenset({0})


def _info(mode: int, uid: int = 0, gid: int = 0) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))


@pytest.mark.parametrize("mode, uid, gid, verdict", [
    (stat.S_IFREG | 0o600, 0, 0, rootonly.HIDE),  # /etc/shadow's kind
    (stat.S_IFREG | 0o640, 0, 42, rootonly.HIDE),  # root reads as the owner
    (stat.S_IFREG | 0o644, 0, 0, rootonly.SKIP),  # others read it too
    (stat.S_IFREG | 0o044, 0, 0, rootonly.SKIP),  # the owner class applies: root cannot
    (stat.S_IFREG | 0o600, 1000, 1000, rootonly.SKIP),  # a user's: DAC keeps root out
    (stat.S_IFREG | 0o640, 1000, 0, rootonly.HIDE),  # root's group may read it
    (stat.S_IFREG | 0o604, 1000, 0, rootonly.SKIP),
    (stat.S_IFDIR | 0o700, 0, 0, rootonly.HIDE),
    (stat.S_IFDIR | 0o711, 0, 0, rootonly.HIDE),  # others may not list it
    (stat.S_IFDIR | 0o755, 0, 0, rootonly.DESCEND),
    (stat.S_IFDIR | 0o700, 1000, 1000, rootonly.SKIP),  # a user's home: root cannot enter
    (stat.S_IFDIR | 0o755, 1000, 1000, rootonly.DESCEND),
    (stat.S_IFDIR | 0o750, 1000, 0, rootonly.HIDE),  # root's group enters, others not
    (stat.S_IFDIR | 0o711, 1000, 1000, rootonly.DESCEND),  # root searches as others do
    (stat.S_IFDIR | 0o744, 1000, 1000, rootonly.SKIP),  # root lists as others do
    (stat.S_IFDIR | 0o751, 0, 0, rootonly.HIDE),  # root lists, others only search
    (stat.S_IFLNK | 0o777, 0, 0, rootonly.SKIP),
])
def test_judged_by_the_class_that_applies_to_root(mode: int, uid: int, gid: int,
                                                 verdict: str) -> None:
    assert rootonly.judge(_info(mode, uid, gid), ROOT_GROUPS) == verdict


def test_a_users_flood_costs_no_cover_and_a_new_root_file_is_found_at_refresh(
        tmp_path: os.PathLike[str]) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to make files another user owns")
    base = str(tmp_path)
    os.chmod(base, 0o755)
    flood = os.path.join(base, "flood")
    os.mkdir(flood, 0o755)
    os.chown(flood, 1000, 1000)
    for i in range(2000):
        path = os.path.join(flood, f"f{i}")
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        os.chown(path, 1000, 1000)
    secret = os.path.join(base, "secret")
    os.close(os.open(secret, os.O_CREAT | os.O_WRONLY, 0o600))
    hidden: dict[str, bool] = {}
    dirs: dict[str, int] = {}
    rootonly._scan(base, frozenset(), hidden, dirs, ROOT_GROUPS)
    assert hidden == {secret: False}
    later = os.path.join(flood, "root-made")
    os.close(os.open(later, os.O_CREAT | os.O_WRONLY, 0o600))  # root's own, in a user's dir
    assert rootonly.refresh(hidden, dirs, (), ROOT_GROUPS)
    assert hidden == {secret: False, later: False}
    assert not rootonly.refresh(hidden, dirs, (), ROOT_GROUPS)


def test_a_removed_tree_is_refreshed_once_from_its_top(tmp_path: os.PathLike[str]) -> None:
    """An `rm -rf node_modules`: every removed directory changed; the refresh re-lists
    from their top changed directory once, and forgets the rest."""
    if os.getuid() != 0:
        pytest.skip("the tree must be root's own, as on a root launch")
    base = str(tmp_path)
    modules = os.path.join(base, "node_modules")
    for i in range(300):
        os.makedirs(os.path.join(modules, f"p{i}", "lib"))
    keep = os.path.join(base, "keep")
    os.mkdir(keep, 0o700)
    hidden: dict[str, bool] = {}
    dirs: dict[str, int] = {}
    rootonly._scan(base, frozenset(), hidden, dirs, ROOT_GROUPS)
    assert len(dirs) == 1 + 1 + 600 and hidden == {keep: True}
    shutil.rmtree(modules)
    assert rootonly.refresh(hidden, dirs, (), ROOT_GROUPS)
    assert set(dirs) == {base} and hidden == {keep: True}


def _large_user_directory(tmp_path: os.PathLike[str]) -> tuple[str, str]:
    base = os.path.join(str(tmp_path), "tree")
    flood = os.path.join(base, "flood")
    os.makedirs(flood)
    for i in range(rootonly.LARGE + 5):
        os.close(os.open(os.path.join(flood, f"f{i}"), os.O_CREAT | os.O_WRONLY, 0o644))
    if os.getuid() == 0:
        os.chown(flood, 1000, 1000)  # a user's directory: only those keep a memo
    return base, flood


def test_a_large_directory_is_listed_again_without_a_stat_per_entry(
        tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """After one change in a directory of many entries, only the new entry is judged: the
    rest are known by name and inode (a user touching one file of 20,000 cost each root
    launch a stat of them all)."""
    base, flood = _large_user_directory(tmp_path)
    listings = rootmemo.Listings(os.path.join(str(tmp_path), "memo"))
    hidden: dict[str, bool] = {}
    dirs: dict[str, int] = {}
    rootonly._scan(base, frozenset(), hidden, dirs, ROOT_GROUPS, listings)
    judged: list[int] = []
    real = rootonly.judge

    def counting(info: os.stat_result, groups: frozenset[int]) -> str:
        judged.append(info.st_ino)
        return real(info, groups)

    monkeypatch.setattr(rootonly, "judge", counting)
    secret = os.path.join(flood, "secret")
    os.close(os.open(secret, os.O_CREAT | os.O_WRONLY, 0o600))
    os.utime(flood, ns=(1, 1))  # a change the refresh must see, whatever the clock's grain
    assert rootonly.refresh(hidden, dirs, (), ROOT_GROUPS, listings)
    assert len(judged) == 1, len(judged)
    assert (secret in hidden) == (os.getuid() == 0)


def test_an_entry_made_again_in_roots_own_large_directory_is_judged_again(
        tmp_path: os.PathLike[str]) -> None:
    """A file deleted and made again 0600 under its name may get its inode back: in a
    directory root owns, no memo stands in for the stat."""
    if os.getuid() != 0:
        pytest.skip("needs root's own directory")
    base = os.path.join(str(tmp_path), "tree")
    large = os.path.join(base, "large")
    os.makedirs(large)
    for i in range(rootonly.LARGE + 10):
        os.close(os.open(os.path.join(large, f"f{i}"), os.O_CREAT | os.O_WRONLY, 0o644))
    listings = rootmemo.Listings(os.path.join(str(tmp_path), "memo"))
    hidden: dict[str, bool] = {}
    dirs: dict[str, int] = {}
    rootonly._scan(base, frozenset(), hidden, dirs, ROOT_GROUPS, listings)
    again = os.path.join(large, "f7")
    os.unlink(again)
    os.close(os.open(again, os.O_CREAT | os.O_WRONLY, 0o600))
    os.utime(large, ns=(1, 1))
    assert rootonly.refresh(hidden, dirs, (), ROOT_GROUPS, listings)
    assert hidden.get(again) is False


def test_what_a_large_directory_hid_stays_hidden_when_it_changes_again(
        tmp_path: os.PathLike[str]) -> None:
    """The memo keeps what was hidden: a later change there does not lose it, and an
    entry made again under its name (a new inode) is judged again."""
    if os.getuid() != 0:
        pytest.skip("a root-only file in a user's directory is made by root")
    base, flood = _large_user_directory(tmp_path)
    secret = os.path.join(flood, "secret")
    os.close(os.open(secret, os.O_CREAT | os.O_WRONLY, 0o600))
    listings = rootmemo.Listings(os.path.join(str(tmp_path), "memo"))
    hidden: dict[str, bool] = {}
    dirs: dict[str, int] = {}
    rootonly._scan(base, frozenset(), hidden, dirs, ROOT_GROUPS, listings)
    assert hidden == {secret: False}
    os.close(os.open(os.path.join(flood, "more"), os.O_CREAT | os.O_WRONLY, 0o600))
    os.chown(os.path.join(flood, "more"), 1000, 1000)
    os.utime(flood, ns=(1, 1))
    assert rootonly.refresh(hidden, dirs, (), ROOT_GROUPS, listings)
    assert hidden == {secret: False}
    os.unlink(secret)
    os.mkdir(secret, 0o700)  # the name again, now a directory only root may enter
    os.utime(flood, ns=(2, 2))
    assert rootonly.refresh(hidden, dirs, (), ROOT_GROUPS, listings)
    assert hidden == {secret: True}
    os.rmdir(secret)
    os.utime(flood, ns=(3, 3))
    assert rootonly.refresh(hidden, dirs, (), ROOT_GROUPS, listings)
    assert hidden == {}


@pytest.mark.parametrize("memo", [b"", b"garbage", b"a\0b\0\0" b"1\0\0", b"a\0\0x\0\0",
                                  b"a\0\0" b"1\0\0a\0?", b"a\0\0" b"1\0\0b\0f", b"\xff\0\0"])
def test_a_damaged_memo_is_ignored(tmp_path: os.PathLike[str], memo: bytes) -> None:
    """A memo that does not parse, or names what is not listed, stands for nothing."""
    listings = rootmemo.Listings(os.path.join(str(tmp_path), "memo"))
    listings.save("/x", {"a": "1"}, {})
    with open(listings._path("/x"), "wb") as handle:
        handle.write(memo)
    known, codes = listings.load("/x")
    assert not codes or codes.keys() <= known.keys()
    assert set(codes.values()) <= {"f", "D", "d", "s"}


@pytest.mark.parametrize("kind", ["fifo", "link", "group-writable"])
def test_a_memo_that_is_not_a_plain_file_of_ours_is_not_read(tmp_path: os.PathLike[str],
                                                              kind: str) -> None:
    """Read as the cache is: a FIFO put in its place is not waited on, a link not
    followed, a file others may write not trusted (each stands for no memo)."""
    listings = rootmemo.Listings(os.path.join(str(tmp_path), "memo"))
    listings.save("/x", {"a": "1"}, {"a": "f"})
    path = listings._path("/x")
    if kind == "group-writable":
        os.chmod(path, 0o620)
    else:
        target = os.path.join(str(tmp_path), "elsewhere")
        os.replace(path, target)
        if kind == "fifo":
            os.mkfifo(path, 0o600)
        else:
            os.symlink(target, path)
    assert listings.load("/x") == ({}, {})


def test_a_memo_keeps_names_that_look_like_its_own_fields(tmp_path: os.PathLike[str]) -> None:
    listings = rootmemo.Listings(os.path.join(str(tmp_path), "memo"))
    known = {"1": "7", "f": "8/", "a\nb": "9", "\udcff": "10"}
    listings.save("/x", known, {"a\nb": "D"})
    assert listings.load("/x") == (known, {"a\nb": "D"})


def test_a_skipped_path_in_a_large_directory_stays_unlisted(
        tmp_path: os.PathLike[str]) -> None:
    base, flood = _large_user_directory(tmp_path)
    inner = os.path.join(flood, "masked")
    os.mkdir(inner, 0o755)
    listings = rootmemo.Listings(os.path.join(str(tmp_path), "memo"))
    hidden: dict[str, bool] = {}
    dirs: dict[str, int] = {}
    rootonly._scan(base, frozenset({inner}), hidden, dirs, ROOT_GROUPS, listings)
    assert inner not in dirs and flood in dirs


def test_only_the_trees_shown_read_only_at_their_own_path_are_walked(
        tmp_path: os.PathLike[str]) -> None:
    from claude_sandbox.launch.planner.mounts import Mount

    base = str(tmp_path)
    for rel in ("usr/lib", "etc", "home/u/.pyenv", "work/ws", "run"):
        os.makedirs(os.path.join(base, rel))
    open(os.path.join(base, "etc", "file"), "w").close()
    os.symlink("usr/lib", os.path.join(base, "lib"))
    mounts = [Mount("ro-bind", f"{base}/{rel}", "", source=f"{base}/{rel}")
              for rel in ("usr", "usr/lib", "etc", "etc/file", "lib", "home/u/.pyenv", "run")]
    mounts += [Mount("bind", f"{base}/work/ws", "", source=f"{base}/work/ws"),  # writable
               Mount("ro-bind", f"{base}/home/u/x", "", source=f"{base}/usr/lib"),  # moved
               Mount("ro-bind-try", f"{base}/gone", "", source=f"{base}/gone"),
               Mount("tmpfs", f"{base}/tmp", "")]
    assert rootonly.shown_trees(mounts, [f"{base}/run"]) == [
        f"{base}/etc", f"{base}/home/u/.pyenv", f"{base}/usr"]


def test_a_users_tree_outside_the_shown_ones_is_never_listed(
        tmp_path: os.PathLike[str]) -> None:
    base = str(tmp_path)
    shown, elsewhere = os.path.join(base, "opt"), os.path.join(base, "home", "u")
    for i in range(50):
        os.makedirs(os.path.join(elsewhere, "node_modules", f"d{i}"))
    os.makedirs(shown)
    with open(os.open(os.path.join(shown, "key"), os.O_WRONLY | os.O_CREAT, 0o600), "w"):
        pass
    hidden = rootonly.private_paths(os.path.join(base, "cache"), [], [shown])
    # Root's own 0600 file is hidden (as another user, DAC keeps root out already).
    assert hidden == ({os.path.join(shown, "key"): False} if os.getuid() == 0 else {})
    cached = rootcache.load(os.path.join(base, "cache"))
    assert cached is not None and list(cached[1]) == [shown]


def test_this_launchs_own_workspace_is_not_read_again_and_the_next_launch_catches_up(
        tmp_path: os.PathLike[str]) -> None:
    base = str(tmp_path)
    shown = os.path.join(base, "usr")
    workspace = os.path.join(shown, "src", "app")
    os.makedirs(os.path.join(workspace, "node_modules"))
    cache = os.path.join(base, "cache")
    assert rootonly.private_paths(cache, [], [shown], [workspace]) == {}
    loaded = rootcache.load(cache)
    assert loaded is not None and workspace in loaded[1]  # walked once, with the tree
    # The agent makes directories in its workspace; this launch does not look at them.
    for i in range(20):
        os.makedirs(os.path.join(workspace, "node_modules", f"d{i}"))
    hidden, dirs, _ = rootcache.load(cache) or ({}, {}, 0.0)
    assert not rootonly.refresh(hidden, dirs, [], rootonly._groups(), own=[workspace])
    # A launch from another workspace, which shows this one read-only, reads them again.
    assert rootonly.refresh(hidden, dirs, [], rootonly._groups(), own=[base + "/elsewhere"])
    assert os.path.join(workspace, "node_modules", "d7") in dirs


def test_the_cache_keeps_any_name_and_a_damaged_one_is_rebuilt(
        tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "cache")
    hidden = {"/etc/shadow": False, "/srv/a\nb \udcff": True}
    dirs = {"/": 1, "/etc": 1_700_000_000_123_456_789, "/x\udcfe/y z": -1}
    rootcache.save(path, hidden, dirs, 12.5)
    assert rootcache.load(path) == (hidden, dirs, 12.5)
    with open(path, "rb") as handle:
        whole = handle.read()
    for damaged in (whole[:-3], whole.replace(b"\0", b"", 1), b"", b"{}", whole + b"\0x"):
        with open(path, "wb") as handle:
            handle.write(damaged)
        assert rootcache.load(path) is None, damaged[:40]


@pytest.mark.skipif(os.getuid() != 0, reason="a directory another user owns is made by root")
def test_explain_walks_without_writing_anything(tmp_path: os.PathLike[str]) -> None:
    base = str(tmp_path)
    shown, store = os.path.join(base, "opt"), os.path.join(base, "store")
    large = os.path.join(shown, "users")
    os.makedirs(large)
    for i in range(rootonly.LARGE):  # a large directory another user owns: it keeps a memo
        open(os.path.join(large, f"f{i}"), "w").close()
    os.chown(large, 65534, 65534)
    hidden = rootonly.private_paths(os.path.join(store, "cache"), [], [shown],
                                    save_cache=False)
    assert hidden == {} and not os.path.exists(store)


@pytest.mark.skipif(os.getuid() != 0, reason="root's own 0600 files are what is hidden")
def test_the_cache_read_before_the_plan_finds_what_a_launch_finds_alone(
        tmp_path: os.PathLike[str]) -> None:
    """rootcache.prefetch reads the cache and its times before the plan (the late-mount
    helper, from the launch's start): what the walk then hides is what it hides without,
    a file made since included, and this launch's own workspace is still not read."""
    base = str(tmp_path)
    shown = os.path.join(base, "usr")
    workspace = os.path.join(shown, "src", "app")
    os.makedirs(os.path.join(shown, "lib", "a"))
    os.makedirs(workspace)
    cache = os.path.join(base, "cache")
    assert rootonly.private_paths(cache, [], [shown], [workspace]) == {}
    secret = os.path.join(shown, "lib", "a", "key")
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w"):
        pass
    os.makedirs(os.path.join(workspace, "node_modules"))
    early = rootcache.prefetch(cache)
    assert early.changed == {os.path.join(shown, "lib", "a"), workspace}
    alone = rootonly.private_paths(cache, [], [shown], [workspace], save_cache=False)
    assert rootonly.private_paths(cache, [], [shown], [workspace], early=early) == alone \
        == {secret: False}
    loaded = rootcache.load(cache)
    assert loaded is not None and os.path.join(workspace, "node_modules") not in loaded[1]
    # Too old to refresh: nothing is read early, and the walk rebuilds it all.
    rootcache.save(cache, *loaded[:2], made=loaded[2] - rootcache.MAX_AGE - 1)
    assert rootcache.prefetch(cache).changed is None
    none = os.path.join(base, "none")
    assert rootcache.prefetch(none) == rootcache.Prefetched(none, None, None, True)
    # Made in the future (a clock set back): never refreshed, rebuilt.
    rootcache.save(cache, *loaded[:2], made=loaded[2] + 3600)
    assert rootcache.prefetch(cache).changed is None
    assert not rootcache.fresh(float("nan"), 0.0) and not rootcache.fresh(float("inf"), 0.0)


def test_a_cache_read_from_another_path_is_not_the_walks(tmp_path: os.PathLike[str]) -> None:
    base = str(tmp_path)
    shown = os.path.join(base, "opt")
    os.makedirs(shown)
    walk = rootonly.Walk(os.path.join(base, "cache"), (), (shown,), (), (), ())
    elsewhere = os.path.join(base, "elsewhere")
    rootcache.save(elsewhere, {os.path.join(shown, "x"): False}, {shown: 1}, time.time(),
                   [shown])
    other = rootcache.Prefetched(elsewhere, rootcache.read(elsewhere), frozenset())
    assert rootonly.covers(walk, early=other) == rootonly.covers(walk)


def test_only_a_cache_nobody_else_may_write_is_loaded(tmp_path: os.PathLike[str]) -> None:
    """marshal trusts its input: a cache another user could have written, a link, a FIFO
    or a body whose checksum differs is refused before it is read."""
    path = os.path.join(str(tmp_path), "cache")
    rootcache.save(path, {"/etc/shadow": False}, {"/etc": 5}, 12.5)
    assert rootcache.load(path) is not None
    os.chmod(path, 0o620)
    assert rootcache.load(path) is None
    os.chmod(path, 0o600)
    link = os.path.join(str(tmp_path), "link")
    os.symlink(path, link)
    assert rootcache.load(link) is None
    fifo = os.path.join(str(tmp_path), "fifo")
    os.mkfifo(fifo, 0o600)
    assert rootcache.load(fifo) is None
    with open(path, "rb") as handle:
        whole = bytearray(handle.read())
    whole[-2] ^= 1
    with open(path, "wb") as handle:
        handle.write(whole)
    assert rootcache.load(path) is None
    # No temporary left.
    assert sorted(os.listdir(str(tmp_path))) == ["cache", "cache.times", "fifo", "link"]


@pytest.mark.skipif(os.getuid() != 0, reason="root's own 0600 files are what is hidden")
def _counted_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that gets "times" each time a cache's directory times are loaded."""
    loads: list[str] = []
    directories = rootcache.directories

    def counted(cached: rootcache.Cache) -> dict[str, int] | None:
        loads.append("times")
        return directories(cached)

    monkeypatch.setattr(rootcache, "directories", counted)
    return loads


def _trees_with_a_key(base: str, *names: str) -> tuple[list[str], list[str]]:
    """Trees below `base`, each with a mode-600 lib/key: the trees, and their keys."""
    trees, secrets = [], []
    for name in names:
        trees.append(os.path.join(base, name))
        os.makedirs(os.path.join(trees[-1], "lib"))
        secrets.append(os.path.join(trees[-1], "lib", "key"))
        os.close(os.open(secrets[-1], os.O_WRONLY | os.O_CREAT, 0o600))
    return trees, secrets


def test_a_launch_that_finds_nothing_changed_loads_no_directory_times(
        tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader found no directory changed and every tree shown was walked before: the
    covers come from the cache's head alone. A tree shown for the first time loads the
    times and is walked; a times part that is not the one written rebuilds the cache.
    The covers are the same each time."""
    base = str(tmp_path)
    (shown, more), secrets = _trees_with_a_key(base, "usr", "opt")
    cache = os.path.join(base, "cache")
    assert rootonly.private_paths(cache, [], [shown]) == {secrets[0]: False}
    directories = rootcache.directories
    loads = _counted_loads(monkeypatch)

    def unchanged() -> rootcache.Prefetched:  # the reader's answer: nothing changed
        return rootcache.Prefetched(cache, rootcache.read(cache), frozenset())

    assert rootonly.private_paths(cache, [], [shown], early=unchanged()) == {
        secrets[0]: False}
    assert loads == []
    both = {secret: False for secret in secrets}
    assert rootonly.private_paths(cache, [], [shown, more], early=unchanged()) == both
    assert loads == ["times"]
    cached = rootcache.read(cache)
    assert cached is not None and cached.walked == {shown, more}
    with open(cache, "r+b") as handle:  # the last byte of the times part
        handle.seek(-1, os.SEEK_END)
        last = handle.read(1)
        handle.seek(-1, os.SEEK_END)
        handle.write(bytes([last[0] ^ 1]))
    damaged = rootcache.read(cache)
    assert damaged is not None and directories(damaged) is None
    early = rootcache.Prefetched(cache, damaged, frozenset({os.path.join(shown, "lib")}))
    assert rootonly.private_paths(cache, [], [shown, more], early=early) == both
    assert rootcache.load(cache) is not None  # written anew


def test_a_tree_no_longer_walked_is_dropped_from_the_cache(
        tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree a root launch now shows through a view (ADR 0020) leaves the walk: the next
    launch drops what the cache holds of it, and the launches after it read its times no
    more, early or late."""
    base = str(tmp_path)
    (kept, viewed), secrets = _trees_with_a_key(base, "etc", "usr")
    cache = os.path.join(base, "cache")
    assert set(rootonly.private_paths(cache, [], [kept, viewed])) == set(secrets)
    assert rootonly.private_paths(cache, [], [kept]) == {secrets[0]: False}
    cached = rootcache.read(cache)
    assert cached is not None and cached.walked == {kept}
    times = rootcache.directories(cached)
    assert times is not None and not any(d.startswith(viewed) for d in times)
    loads = _counted_loads(monkeypatch)
    unchanged = rootcache.Prefetched(cache, rootcache.read(cache), frozenset())
    assert rootonly.private_paths(cache, [], [kept], early=unchanged) == {secrets[0]: False}
    assert loads == []


@pytest.mark.skipif(os.getuid() != 0, reason="a directory another user owns is made by root")
def test_a_full_rebuild_removes_the_memos_of_directories_it_did_not_list(
        tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each large directory another user owns leaves a memo beside the cache. One whose
    directory is gone is removed by the next full rebuild (not by `explain`'s), so the
    store does not keep the memos of every such directory it ever listed."""
    base, flood = _large_user_directory(tmp_path)
    gone = os.path.join(base, "gone")
    shutil.copytree(flood, gone)
    os.chown(gone, 1000, 1000)
    cache = os.path.join(str(tmp_path), "store", "cache")
    assert rootonly.private_paths(cache, [], [base]) == {}
    memos = os.path.join(str(tmp_path), "store", "cache.d")
    assert len(os.listdir(memos)) == 2
    shutil.rmtree(gone)
    monkeypatch.setattr(rootcache, "fresh", lambda made, now: False)  # a day old
    rootonly.private_paths(cache, [], [base], save_cache=False)
    assert len(os.listdir(memos)) == 2
    rootonly.private_paths(cache, [], [base])
    kept = rootmemo.Listings(memos)
    assert os.listdir(memos) == [os.path.basename(kept._path(flood))]
    assert len(kept.load(flood)[0]) == rootonly.LARGE + 5
