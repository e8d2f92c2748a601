"""What the egress proxy adds to a jailed launch (not a test).

The launch has no switch that leaves the proxy out, and must not have one. So this
bench makes two copies of the installed package side by side under /usr/local/lib
(shown read-only inside the sandbox, as the package is): one as installed, and one
whose launcher never asks the holder for the proxy nor gives it a policy (the edits are
in WITHOUT_PROXY, each one checked to apply). Everything else stays: the packet filter
still redirects to the proxy's ports, which /bin/true never uses. Both run
`claude-sandbox shell -- /bin/true` as USER, alternating, and the report is the median
of the paired differences and of the paired ratios (target: at most 5 ms added).

Root only (it writes under /usr/local/lib and switches to USER):

    flock /tmp/claude-sandbox-ns.lock python3 bench/bench_proxy_launch.py [--runs N] [--as USER]
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CORE_PYTHON = "/usr/libexec/claude-sandbox/venv/bin/python"
TARGET_MS = 5.0
# (file under claude_sandbox/, text, replacement): the launcher without the proxy.
WITHOUT_PROXY = (
    ("jail/session.py",
     '            channel.send(self._sock, ["proxy"], [self._proxy_end.fileno()])\n', ""),
    ("jail/session.py", "            self._proxy_started(self._receive())\n", ""),
    ("jail/session.py", "            self._give_policy(record_fd, broker)\n", ""),
    ("jail/session.py", "            self._policy_taken()\n", ""),
)


def _installed_package() -> str:
    out = subprocess.run([CORE_PYTHON, "-I", "-c",
                          "import claude_sandbox, os; print(os.path.dirname("
                          "claude_sandbox.__file__))"],
                         capture_output=True, text=True, check=True).stdout
    return out.strip()


def _copies(top: str) -> tuple[str, str]:
    package = _installed_package()
    paths = []
    for name in ("with", "without"):
        where = os.path.join(top, name)
        shutil.copytree(package, os.path.join(where, "claude_sandbox"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        paths.append(where)
    for relative, old, new in WITHOUT_PROXY:
        target = os.path.join(paths[1], "claude_sandbox", relative)
        with open(target) as f:
            text = f.read()
        if text.count(old) != 1:
            raise SystemExit(f"bench_proxy_launch: {relative} no longer has {old!r}: "
                             "update WITHOUT_PROXY")
        with open(target, "w") as f:
            f.write(text.replace(old, new))
    for where in paths:  # as installed: compiled, readable by USER
        subprocess.run([CORE_PYTHON, "-m", "compileall", "-q", where], check=True)
        subprocess.run(["chmod", "-R", "a+rX", where], check=True)
    return paths[0], paths[1]


def _argv(package: str, user: pwd.struct_passwd) -> list[str]:
    code = (f"import sys; sys.path.insert(0, {package!r}); from claude_sandbox.__main__ "
            "import main; sys.exit(main(['shell', '--', '/bin/true']))")
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
            CORE_PYTHON, "-I", "-S", "-c", code]


def _timed(argv: list[str], cwd: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
    took = (time.perf_counter() - started) * 1000
    if result.returncode != 0:
        raise SystemExit(f"bench_proxy_launch: a launch failed: {result.stderr[-400:]!r}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--as", dest="user", default="sbxuser")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_proxy_launch: run as root (see --help)", file=sys.stderr)
        return 1
    user = pwd.getpwnam(args.user)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": user.pw_dir, "LC_ALL": "C.UTF-8"}
    top = tempfile.mkdtemp(prefix="csbx-bench-", dir="/usr/local/lib")
    os.chmod(top, 0o755)
    workspace = tempfile.mkdtemp(prefix="csbx-bench-ws-")
    try:
        os.chown(workspace, user.pw_uid, user.pw_gid)
        with_proxy, without = (_argv(p, user) for p in _copies(top))
        for _ in range(3):  # warm the page cache and the state store
            _timed(with_proxy, workspace, env)
            _timed(without, workspace, env)
        pairs = []
        for run in range(args.runs):  # alternating, the order swapped every other pair
            first, second = (with_proxy, without) if run % 2 else (without, with_proxy)
            a, b = _timed(first, workspace, env), _timed(second, workspace, env)
            pairs.append((a, b) if first is with_proxy else (b, a))
    finally:
        shutil.rmtree(top, ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)
    added = statistics.median(p - q for p, q in pairs)
    ratio = statistics.median(p / q for p, q in pairs)
    print(f"jailed launch as {args.user}, {args.runs} pairs: with the proxy "
          f"{statistics.median(p for p, _ in pairs):.1f} ms, without "
          f"{statistics.median(q for _, q in pairs):.1f} ms (medians); added: "
          f"{added:.1f} ms (median of differences), ratio {ratio:.3f} "
          f"(target: at most {TARGET_MS:.0f} ms added)")
    met = added <= TARGET_MS
    print("target met" if met else "target NOT met")
    return 0 if met else 2


if __name__ == "__main__":
    raise SystemExit(main())
