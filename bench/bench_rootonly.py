"""What an unprivileged user's files cost a root launch, in the same run (not a test).

A root launch covers what only root's own modes let it read (launch/facts/rootonly.py). An
unprivileged user must not be able to make every root launch on the machine slow by
making files: 20,000 empty mode-600 files once cost one mount each (0.5 s became 15 s),
and removing 50,000 directories stalled the next launch's cache refresh for 106 s.
This bench, as root, times `claude-sandbox shell -- /bin/true` (the default launch):

  baseline          before anything is made, and after it is removed again
  flood, first      the first launch after a user made FILES 0600 files (the refresh
                    lists their directory once)
  flood, steady     the launches after it (target: at most baseline + 50 ms)
  flood, touched    the launch after the user made one more file there (target: at most
                    50 ms over a launch after the user made one more file in a small
                    directory; the directory is listed again, its entries known by inode)
  tree, removed     the first launch after DIRS directories the cache knew were removed

Each pair of rows is interleaved, and the floors are measured before the flood and again
after it was removed, so that drift falls on both sides alike.

    flock /tmp/claude-sandbox-ns.lock python3 bench/bench_rootonly.py [--runs N]
        [--files N] [--dirs N] [--user NAME]
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import statistics
import subprocess
import tempfile
import time

SHIM = "/usr/local/bin/claude-sandbox"
TARGET_EXTRA = 50.0


def _launch(workspace: str) -> float:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root"}
    start = time.perf_counter()
    subprocess.run([SHIM, "shell", "--", "/bin/true"], env=env, cwd=workspace, check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def _median(workspace: str, runs: int) -> float:
    return statistics.median(_launch(workspace) for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--dirs", type=int, default=50_000)
    parser.add_argument("--user", default="sbxuser")
    args = parser.parse_args()
    if os.getuid() != 0:
        raise SystemExit("bench_rootonly: run as root (it times root launches)")
    user = pwd.getpwnam(args.user)
    workspace = tempfile.mkdtemp(prefix="csbx-bench-ws-")
    # A place the user may write that a root launch walks (not /tmp, /var/tmp or a home).
    place = tempfile.mkdtemp(prefix="csbx-bench-flood-", dir="/opt")
    os.chmod(place, 0o755)
    os.chown(place, user.pw_uid, user.pw_gid)
    as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
               "--clear-groups"]
    small = os.path.join(place, "small")
    flood = os.path.join(place, "files")
    made = iter(range(10**9))

    def rows(directory: str) -> tuple[float, float]:
        """Medians of launches as they are and of launches after the user made one more
        file in `directory`, interleaved so that drift falls on both alike."""
        still, touched = [], []
        for _ in range(args.runs):
            still.append(_launch(workspace))
            subprocess.run([*as_user, "touch", f"{directory}/more{next(made)}"], check=True)
            touched.append(_launch(workspace))
        return statistics.median(still), statistics.median(touched)

    try:
        subprocess.run([*as_user, "mkdir", small], check=True)
        _launch(workspace)  # the cache, made or brought up to date
        before = rows(small)
        subprocess.run([*as_user, "/usr/bin/python3", "-c",
                        "import os, sys\nos.mkdir(sys.argv[1], 0o755)\n"
                        "for i in range(int(sys.argv[2])):\n"
                        "    os.close(os.open(f'{sys.argv[1]}/f{i}', os.O_CREAT | os.O_WRONLY,"
                        " 0o600))\n", flood, str(args.files)], check=True)
        first = _launch(workspace)
        flooded = rows(flood)
        shutil.rmtree(flood)
        _launch(workspace)  # the cache forgets the flood
        after = rows(small)
        tree = os.path.join(place, "node_modules")
        for i in range(args.dirs):
            os.makedirs(os.path.join(tree, f"p{i // 100}", f"d{i}"), exist_ok=True)
        _launch(workspace)  # the cache learns the tree
        shutil.rmtree(tree)
        removed = _launch(workspace)
    finally:
        shutil.rmtree(place, ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)
    # The floor: the same launches without the flood, before it and after it was removed.
    baseline = (before[0] + after[0]) / 2
    baseline_touched = (before[1] + after[1]) / 2
    print(f"{'row':<30}{'ms':>10}")
    print(f"{'baseline':<30}{baseline:>10.1f}   (before {before[0]:.1f}, after {after[0]:.1f})")
    print(f"{'baseline, one more file':<30}{baseline_touched:>10.1f}   "
          f"(before {before[1]:.1f}, after {after[1]:.1f}; in a small directory)")
    print(f"{f'flood of {args.files}, first':<30}{first:>10.1f}")
    for name, value, floor in ((f"flood of {args.files}, steady", flooded[0], baseline),
                               ("flood, one more file", flooded[1], baseline_touched)):
        extra = value - floor
        mark = "ok" if extra <= TARGET_EXTRA else "OVER"
        print(f"{name:<30}{value:>10.1f}   {extra:+.1f} ms (target +{TARGET_EXTRA:.0f}: {mark})")
    print(f"{f'{args.dirs} dirs removed':<30}{removed:>10.1f}")


if __name__ == "__main__":
    main()
