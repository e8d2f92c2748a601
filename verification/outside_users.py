"""Probes made outside as another local user: what an unprivileged user makes in shared
places must not slow every root launch (A66) nor refuse a launch (A67), and a time set
back on a directory of theirs must not hide a file root made there from the next root
launch (A72).

The runner needs root to act as that other user (`nobody`). As a user, A66 is skipped (a
user's launch walks no root-only file) and A67 counts only names another user already
holds. What a probe makes it removes; it never moves or touches what was there before.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence

from outside import Result

FLOOD_FILES = 20_000
# Directories another user made that give root what they give everyone (mode 0711): once
# a cover each, now walked. Fewer than the files: each costs a refresh its lstat (ADR 0015).
FLOOD_DIRS = 500
FLOOD_TARGET_MS = 50.0
RUNS = 5
# Where the flood goes: the first of these the root launch shows read-only at its own
# path (the walk covers what a root launch shows; see explain --json's mounts).
FLOOD_PARENTS = ("/opt", "/srv", "/var")
_MAKE_FILES = ("import os, sys\n"
               "for i in range(int(sys.argv[2])):\n"
               "    os.close(os.open(f'{sys.argv[1]}/f{i}', os.O_CREAT | os.O_WRONLY, 0o600))\n"
               "for i in range(int(sys.argv[3])):\n"
               "    os.mkdir(f'{sys.argv[1]}/d{i}')\n"
               "    os.chmod(f'{sys.argv[1]}/d{i}', 0o711)\n")


def _other_user() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


def _as_other(argv: Sequence[str]) -> None:
    uid, gid = _other_user()
    subprocess.run(argv, check=True, user=uid, group=gid, extra_groups=[], cwd="/",
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=300)


def _launch(shim: str, agent: str, workdir: str, environ: Mapping[str, str],
            script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([shim, "shell", "--agent", agent, "--", "sh", "-c", script],
                          cwd=workdir, env=dict(environ), capture_output=True, text=True,
                          check=False, stdin=subprocess.DEVNULL, timeout=300)


def _timed(shim: str, agent: str, workdir: str, environ: Mapping[str, str]) -> float:
    start = time.perf_counter()
    ran = _launch(shim, agent, workdir, environ, "true")
    if ran.returncode != 0:
        raise RuntimeError(f"a root launch failed (exit {ran.returncode}): "
                           f"{ran.stderr.strip()[-200:]}")
    return (time.perf_counter() - start) * 1000


def _explain(shim: str, agent: str, workdir: str, environ: Mapping[str, str]
             ) -> dict[str, object]:
    ran = subprocess.run([shim, "explain", "--json", "--agent", agent], cwd=workdir,
                         env=dict(environ), capture_output=True, text=True, check=False,
                         stdin=subprocess.DEVNULL, timeout=300)
    if ran.returncode != 0:
        raise RuntimeError(f"explain failed (exit {ran.returncode}): {ran.stderr.strip()}")
    plan: dict[str, object] = json.loads(ran.stdout)
    return plan


def _flood_parent(plan: Mapping[str, object]) -> str | None:
    shown = {m["source"] for m in plan.get("mounts", [])  # type: ignore[attr-defined]
             if m.get("kind") in ("ro-bind", "ro-bind-try") and m.get("source") == m.get("dest")}
    for parent in FLOOD_PARENTS:
        if parent in shown and os.path.isdir(parent) and not os.path.islink(parent):
            return parent
    return None


def _covered_below(plan: Mapping[str, object], top: str) -> list[str]:
    """The root launch's covers (explain --json: late_masks.root_only) at or below `top`."""
    masks = plan.get("late_masks")
    found = masks.get("root_only") or [] if isinstance(masks, dict) else []
    return [str(path) for path in found if path == top or str(path).startswith(top + "/")]


def _viewed(plan: Mapping[str, object], path: str) -> bool:
    """Whether the root launch shows `path` through a view that refuses root's own files
    by their modes' class (explain --json: late_masks.root_only_views, ADR 0020)."""
    masks = plan.get("late_masks")
    views = masks.get("root_only_views") or [] if isinstance(masks, dict) else []
    return any(path == top or path.startswith(str(top).rstrip("/") + "/") for top in views)


def _place_of_theirs(number: str, prefix: str, shim: str, agent: str, workdir: str,
                     environ: Mapping[str, str]) -> tuple[str, str, int] | Result:
    """A directory of the other user's, mode 0755, in the first tree of FLOOD_PARENTS a
    root launch shows: (that tree, the directory, the user's uid); or the probe's SKIP or
    FAIL."""
    if os.getuid() != 0:
        return Result(number, "SKIP", "a user's launch walks no root-only file; run verify "
                      "as root for the root launch's walk")
    try:
        parent = _flood_parent(_explain(shim, agent, workdir, environ))
        if parent is None:
            return Result(number, "SKIP", "no tree of " + ", ".join(FLOOD_PARENTS)
                          + " is shown read-only to a root launch here")
        place = tempfile.mkdtemp(prefix=prefix, dir=parent)
    except (OSError, RuntimeError, ValueError) as error:
        return Result(number, "FAIL", f"could not prepare: {error}")
    try:
        uid, gid = _other_user()
        os.chown(place, uid, gid)
        os.chmod(place, 0o755)
    except OSError as error:
        shutil.rmtree(place, ignore_errors=True)
        return Result(number, "FAIL", f"could not prepare: {error}")
    return parent, place, uid


def probe_a66_root_only_flood(shim: str, agent: str, workdir: str,
                              environ: Mapping[str, str]) -> Result:
    """Another user makes 20,000 empty mode-600 files and 500 directories of mode 0711 in
    a tree root launches show: none of them is covered, and a root launch takes at most
    50 ms longer (medians; the floor before the flood and after its removal)."""
    prepared = _place_of_theirs("A66", "csbx-flood-", shim, agent, workdir, environ)
    if isinstance(prepared, Result):
        return prepared
    parent, place, uid = prepared
    try:
        flood = os.path.join(place, "files")

        def launches() -> list[float]:
            _timed(shim, agent, workdir, environ)  # the cache brought up to date first
            return [_timed(shim, agent, workdir, environ) for _ in range(RUNS)]

        # The floor is measured before the flood and again after its removal, so that the
        # machine's drift falls on both sides. A round over the target is run once more: a
        # cost the flood really adds is there both times, two cores' noise seldom is.
        rounds: list[tuple[float, float]] = []
        covered: list[str] = []
        while len(rounds) < 2 and not covered:
            floor = launches()
            _as_other([sys.executable, "-I", "-c",
                       "import os, sys; os.mkdir(sys.argv[1], 0o755)", flood])
            _as_other([sys.executable, "-I", "-c", _MAKE_FILES, flood, str(FLOOD_FILES),
                       str(FLOOD_DIRS)])
            with_them = statistics.median(launches())
            covered = _covered_below(_explain(shim, agent, workdir, environ), place)
            shutil.rmtree(flood)
            rounds.append((statistics.median(floor + launches()), with_them))
            if rounds[-1][1] - rounds[-1][0] <= FLOOD_TARGET_MS:
                break
        before, after = min(rounds, key=lambda pair: pair[1] - pair[0])
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as error:
        return Result("A66", "FAIL", f"the probe could not run: {error}")
    finally:
        shutil.rmtree(place, ignore_errors=True)
    figures = (f"{FLOOD_FILES} mode-600 files and {FLOOD_DIRS} mode-711 directories of "
               f"uid {uid} in {parent}: a root launch "
               f"{before:.0f} ms without, {after:.0f} ms with them ({after - before:+.0f} ms, "
               f"at most +{FLOOD_TARGET_MS:.0f}; {len(rounds)} round(s))")
    if covered:
        return Result("A66", "FAIL", f"{figures}; {len(covered)} covers for them, e.g. "
                      f"{covered[0]}")
    if after - before > FLOOD_TARGET_MS:
        return Result("A66", "FAIL", figures)
    return Result("A66", "PASS", f"{figures}; no cover for any of them")


def _candidates(agent: str, uid: int, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The names a launch of `agent` takes in shared places: its scratch directory's two,
    and the store's in a shared state-dir."""
    from claude_sandbox.launch.configure import config, profiles

    profile = profiles.get(agent)
    names: tuple[str, ...] = ()
    if profile.tmp_dir:
        names += (profile.tmp_dir, f"{profile.tmp_dir}-{uid}")
    state_dir = config.load(profile.name, environ).state_dir
    if state_dir:
        names += (os.path.join(state_dir, str(uid)),)
    return names


def _shared(directory: str) -> bool:
    """Whether any user may make a name in `directory` (a 1777 /var/tmp or state-dir)."""
    try:
        return bool(os.stat(directory).st_mode & 0o002)
    except OSError:
        return False


def probe_a67_squatted_scratch(shim: str, agent: str, workdir: str,
                               environ: Mapping[str, str]) -> Result:
    """Another user makes, first, the directory a launch would make in a shared place (the
    scratch directory's names, the store's in a shared state-dir): the launch still runs,
    in directories of its own, and puts nothing in the squatted ones."""
    uid = os.getuid()
    names = _candidates(agent, uid, environ)
    if not names:
        return Result("A67", "PASS", f"{agent}'s launch takes no name in a shared place: no "
                      "scratch directory, and its store is in the home (no state-dir)")
    squatted: list[str] = []
    made: list[str] = []
    try:
        for name in names:
            try:
                owner = os.lstat(name).st_uid
            except FileNotFoundError:
                if uid != 0 or not _shared(os.path.dirname(name)):
                    continue  # only root can act as another user; only there can others
                _as_other(["mkdir", "-m", "755", name])
                made.append(name)
                squatted.append(name)
                continue
            if owner != uid:
                squatted.append(name)  # another user's already
        if not squatted:
            return Result("A67", "SKIP", "no name to squat: each of " + ", ".join(names)
                          + " is this user's own, or lies where only root may make it (run "
                          "verify as root on a machine without them)")
        ran = _launch(shim, agent, workdir, environ, 'echo "tmp=${CLAUDE_CODE_TMPDIR:-}"')
        used = ran.stdout.strip().splitlines()[-1].removeprefix("tmp=") if ran.stdout else ""
        if ran.returncode != 0:
            return Result("A67", "FAIL", f"with {', '.join(squatted)} made by another user "
                          f"the launch failed (exit {ran.returncode}): "
                          f"{ran.stderr.strip()[-200:]}")
        if used in squatted or any(os.listdir(name) for name in made):
            return Result("A67", "FAIL", f"the session used a squatted directory ({used})")
    except (OSError, subprocess.SubprocessError) as error:
        return Result("A67", "FAIL", f"the probe could not run: {error}")
    finally:
        for name in made:
            shutil.rmtree(name, ignore_errors=True)
    return Result("A67", "PASS", f"{', '.join(squatted)} made first by another user: the "
                  f"launch ran in {used}, its own")


SECRET_A72 = "claude-sandbox probe A72: root's own, behind a time set back"
_SET_BACK = "import os, sys; os.utime(sys.argv[1], ns=(int(sys.argv[2]),) * 2)"


def _refreshes(agent: str, environ: Mapping[str, str], place: str) -> str | None:
    """None when root's walk cache holds `place` and the next launch refreshes it rather
    than rebuilds it (a rebuild covers a new file whatever the times); else why not."""
    from claude_sandbox.launch.configure import config, profiles
    from claude_sandbox.launch.facts import hostfacts, rootcache
    from claude_sandbox.launch.session import state

    cfg = config.load(profiles.get(agent).name, environ)
    store = state.store_root(cfg.state_dir, hostfacts.login_home(), os.getuid())
    cache = rootcache.read(os.path.join(store, rootcache.CACHE_NAME))
    if cache is None or not rootcache.fresh(cache.made, time.time() + 600):
        return "root's walk cache is missing or due for its daily rebuild; run again"
    if place not in (rootcache.directories(cache) or {}):
        return f"root's walk cache does not hold {place}: the walk does not go there"
    return None


def probe_a72_time_set_back(shim: str, agent: str, workdir: str,
                            environ: Mapping[str, str]) -> Result:
    """Another user owns a directory in a tree root launches show. After a root launch has
    cached its time, root makes a mode-600 file there, as root's own tools may in a shared
    place, and the user sets the directory's modification time back to the cached one:
    the next root launch still covers the file, and its text is not read inside."""
    prepared = _place_of_theirs("A72", "csbx-setback-", shim, agent, workdir, environ)
    if isinstance(prepared, Result):
        return prepared
    parent, place, uid = prepared
    try:
        _timed(shim, agent, workdir, environ)  # the walk caches the directory and its time
        viewed = _viewed(_explain(shim, agent, workdir, environ), place)
        refreshed = None if viewed else _refreshes(agent, environ, place)
        if refreshed is not None:
            return Result("A72", "SKIP", refreshed)
        cached = os.lstat(place).st_mtime_ns
        secret = os.path.join(place, "root.key")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600),
                  "w") as handle:
            handle.write(SECRET_A72)
        _as_other([sys.executable, "-I", "-c", _SET_BACK, place, str(cached)])
        if os.lstat(place).st_mtime_ns != cached:
            return Result("A72", "FAIL", "the other user could not set the time back")
        covered = _covered_below(_explain(shim, agent, workdir, environ), place)
        ran = _launch(shim, agent, workdir, environ, f"cat {secret} 2>/dev/null; true")
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as error:
        return Result("A72", "FAIL", f"the probe could not run: {error}")
    finally:
        shutil.rmtree(place, ignore_errors=True)
    if ran.returncode != 0:
        return Result("A72", "FAIL", f"the root launch failed (exit {ran.returncode}): "
                      f"{ran.stderr.strip()[-200:]}")
    if viewed and SECRET_A72 not in ran.stdout:
        return Result("A72", "PASS", f"root's mode-600 file in uid {uid}'s directory under "
                      f"{parent}, its modification time set back: refused inside by its "
                      "mode's class (a view, ADR 0020): no walk's time to fool")
    if SECRET_A72 in ran.stdout or secret not in covered:
        return Result("A72", "FAIL", f"root's mode-600 file in uid {uid}'s directory under "
                      f"{parent}, its time set back: "
                      + ("read inside" if SECRET_A72 in ran.stdout else "not covered"))
    return Result("A72", "PASS", f"root's mode-600 file in uid {uid}'s directory under "
                  f"{parent}, its modification time set back to the cached one: covered, "
                  "and not read inside (the walk keeps status-change times)")
