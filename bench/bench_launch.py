"""What a launch costs, against floors measured in the same run (not a test).

One table: the floors, the installed launcher with the jail on and off, the ratios
against the targets, the resident memory of a waiting session, and eight launches at
once. Every timed row runs `/bin/true`; rows are interleaved run by run, so the
machine's drift falls on all of them alike.

  floor: bare bwrap     bwrap --ro-bind / / --dev /dev --proc /proc /bin/true
  floor: jailed         unshare -rn holder + pasta attach (the jail's flags) + the same bwrap
  python -I -c pass     the core interpreter's own start, for scale
  CPU: launcher, jailed the launcher's own CPU (user and system) in a jailed launch, its
                        interpreter's start included: read as it ends, the steadiest
                        figure of the launcher, the jailed launch's critical path
  CPU: interpreter start the same figure for `python -I -S` alone
  floor: the plan       bwrap with this launch's own options and mounts (no inner stage)
  floor: plan + stage   the same bwrap running the inner stage, then /bin/true: what the
                        defences cost before any launcher work
  launch, jail off      claude-sandbox shell -- /bin/true, egress-jail = 0
  launch, jailed        claude-sandbox shell -- /bin/true (the default)
  claude --version      the root-owned program run directly, and through the shim (which
                        answers it without the sandbox: launch/quick.py, check 94);
                        target: the shim adds at most 60 ms

  8 at once             eight launches started together, jail off and jailed, each in a
                        workspace of its own (mean, worst); and eight jailed floors
                        together, the same ratio for the jail's own processes alone
  phases                the median of each phase CLAUDE_SANDBOX_TRACE=1 prints for a
                        jailed launch, against its budget (BUDGETS), over budget marked
  root launch           as root before the rest runs as USER: the same launch as root
                        and as USER (through setpriv), interleaved; target: root adds
                        at most 15 ms

Targets: jailed at most 2.0 x the jailed floor; jail off at most the bare bwrap floor
+ 40 ms; 8 launches at once at most 3 x one. As root, `--as USER` measures as that user
(the figures that matter are a normal user's; the egress-jail must be allowed off for
the jail-off rows: `env-may-widen = egress-jail`).

    flock /tmp/claude-sandbox-ns.lock python3 bench/bench_launch.py [--runs N] [--as USER]
"""

from __future__ import annotations

import argparse
import os
import pwd
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
CORE_PYTHON = "/usr/libexec/claude-sandbox/venv/bin/python"
SHIM = "/usr/local/bin/claude-sandbox"
BWRAP_FLOOR = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "/bin/true"]
TARGET_RATIO, TARGET_EXTRA, TARGET_CONCURRENT = 2.0, 40.0, 3.0
TARGET_ROOT_EXTRA = 15.0
# Each traced phase's budget (ms), the launcher's ("trace") and the jail's ("jail"): what
# the jailed target (2.0 x a floor of about 30 ms) leaves each, summed along the path
# that waits (the jail's phases overlap the launcher's plan).
BUDGETS = {
    "trace: config": 3.0, "trace: plan": 10.0, "trace: jail started": 1.0,
    "trace: prepared": 3.0, "trace: session ended": 30.0,
    # The workspace's exit, and the wait for the jail's teardown that runs beside it.
    "trace: workspace applied and reported": 4.0, "trace: torn down": 3.0,
    "jail: holder spawned": 1.0, "jail: holder namespace up": 4.0,
    "jail: tap device made": 3.0, "jail: pasta spawned": 1.0,
    "jail: packet filter answered, proxy forked, policy given": 5.0,
    "jail: packet filter programmed and verified": 1.0,
    "jail: pasta attached": 1.0, "jail: namespace read, plan built": 2.0,
    "jail: routes programmed and verified": 4.0, "jail: overlays mounted": 0.5,
    "jail: proxy serving": 1.0, "jail: session started": 2.0, "jail: teardown begun": 0.5,
    "jail: teardown": 3.0,
}
TARGET_VERSION_EXTRA = 60.0
REAL_CLAUDE = "/usr/libexec/claude-sandbox/real/claude"
CONCURRENT = 8
# The launcher's own CPU (user and system): the shim's own code (placed.SHIM_CODE), after
# the launch's last step (os._exit) is wrapped to write it out first. The steadiest
# figure of the launcher, the jailed launch's critical path: pasta's, bwrap's and the
# holder's CPU vary from one launch to the next by more than a change to the launcher
# moves (ADR 0004).
_CPU_PRELUDE = """\
import os, time
me, end = os.getpid(), os._exit
def leave(status):
    if os.getpid() == me:
        with open({report!r}, "w") as out:
            out.write(repr(1000 * time.process_time()))
    end(status)
os._exit = leave
"""


def _timed(argv: list[str], env: dict[str, str], cwd: str | None = None) -> float:
    start = time.perf_counter()
    ran = subprocess.run(argv, env=env, check=False, stdin=subprocess.DEVNULL, cwd=cwd,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = (time.perf_counter() - start) * 1000
    if ran.returncode != 0:  # what it said, not only that it failed
        raise RuntimeError(f"{' '.join(argv)} in {cwd}: exit {ran.returncode}: "
                           f"{ran.stderr.decode(errors='replace')[-600:]}")
    return took


def _launcher_cpu(env: dict[str, str], report: str) -> float:
    """The CPU (ms) a jailed launch's launcher spends, its interpreter's start included."""
    from claude_sandbox.install.placed import SHIM_CODE

    _timed([CORE_PYTHON, "-I", "-S", "-c", _CPU_PRELUDE.format(report=report) + SHIM_CODE,
            "shell", "--", "/bin/true"], env)
    with open(report) as handle:
        return float(handle.read())


def _start_cpu(env: dict[str, str]) -> float:
    """The CPU (ms) the core interpreter spends to start, as the launcher's is read."""
    ran = subprocess.run([CORE_PYTHON, "-I", "-S", "-c",
                          "import time; print(1000 * time.process_time())"],
                         env=env, check=True, capture_output=True, text=True)
    return float(ran.stdout)


def _tree(root: int) -> list[int]:
    """`root` and every descendant, by the kernel's children lists."""
    found, queue = [], [root]
    while queue:
        pid = queue.pop()
        found.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as handle:
                    queue += [int(child) for child in handle.read().split()]
        except OSError:
            continue
    return found


def _memory(pid: int) -> tuple[str, int, int]:
    """(name, RSS KiB, anonymous RSS KiB) of one process; ("", 0, 0) once it is gone.

    From /proc/PID/status, which stays readable when a process is not dumpable
    (the launcher, pasta): smaps_rollup does not.
    """
    fields: dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
    except OSError:
        return "", 0, 0
    kib = [int(fields.get(key, "0 kB").split()[0]) for key in ("VmRSS", "RssAnon")]
    return fields.get("Name", ""), kib[0], kib[1]


class PlanFloor:
    """bwrap as a launch from here would run it (its plan, its placeholders made), timed
    with and without the inner stage: the part of a launch that is the defences
    themselves, with no launcher around it."""

    def __init__(self, env: dict[str, str]) -> None:
        from claude_sandbox.core import paths
        from claude_sandbox.launch import run
        from claude_sandbox.launch.configure import config
        from claude_sandbox.launch.facts import gather
        from claude_sandbox.launch.planner import limits, plan
        from claude_sandbox.launch.session import cgroups, state

        profile = gather.profiles.get("claude")
        cfg = config.load("claude", env)
        caps = limits.plan_limits(cfg.max_pids, cfg.max_memory, cgroups.CgroupFacts(),
                                  os.getuid())
        request = run.Request("claude", ("/bin/true",), ())
        store = state.store_root(cfg.state_dir, gather.hostfacts.login_home(), os.getuid())
        facts = gather.gather(profile, cfg, request, env, (), store)
        self.plan = plan.make(profile, cfg, facts, caps)
        self.home = (facts.facts.store_home, facts.facts.home)
        self.env = dict(self.plan.env)
        self.bwrap = paths.tool("bwrap")

    def once(self, enter: bool) -> float:
        from claude_sandbox.core.process import data_descriptor
        from claude_sandbox.inside import spec
        from claude_sandbox.launch.planner import render, seccomp
        from claude_sandbox.launch.session import mountpoints

        opened = {name: data_descriptor(name, text.encode()) for name, text in self.plan.data}
        opened[render.SECCOMP] = seccomp.filter_fd(self.plan.inner.level)
        opened[render.INNER] = data_descriptor("inner", spec.encode(self.plan.inner, None))
        opened.update(mountpoints.make(*self.home, self.plan.mounts, "claude"))  # the pins
        argv = render.bwrap_argv(self.plan, self.bwrap, {k: str(v) for k, v in opened.items()})
        if not enter:
            argv = [*argv[: argv.index("--") + 1], "/bin/true"]
        start = time.perf_counter()
        subprocess.run(argv, env=self.env, pass_fds=list(opened.values()), check=True)
        took = (time.perf_counter() - start) * 1000
        for fd in opened.values():
            os.close(fd)
        return took

def waiting_session(env: dict[str, str]) -> list[tuple[str, int, int]]:
    """The processes a session keeps up while the agent (`sleep`) waits: all but the agent."""
    launch = subprocess.Popen([SHIM, "shell", "--", "/bin/sleep", "60"], env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if any(_memory(pid)[0] == "sleep" for pid in _tree(launch.pid)):
                time.sleep(0.3)  # settled: nothing of the set-up still running
                found = [_memory(pid) for pid in _tree(launch.pid)]
                return [row for row in found if row[0] not in ("sleep", "")]
            time.sleep(0.02)
        raise SystemExit("the session did not start within 20 s")
    finally:
        launch.terminate()
        launch.wait()


def concurrent(argv: list[str], env: dict[str, str], rounds: int) -> list[float]:
    """Each launch's time when CONCURRENT start together (each in a workspace of its
    own, as eight projects' agents would), over `rounds` rounds."""
    return _together(lambda cwd: _timed(argv, env, cwd), rounds)


def _together(run: Callable[[str], float], rounds: int) -> list[float]:
    """Each run's time (ms) when CONCURRENT start together, each given a directory of
    its own, over `rounds` rounds."""
    times: list[float] = []
    lock = threading.Lock()
    workspaces = [tempfile.mkdtemp(prefix="cs-bench-") for _ in range(CONCURRENT)]

    def one(gate: threading.Barrier, cwd: str) -> None:
        gate.wait()
        took = run(cwd)
        with lock:
            times.append(took)

    for _ in range(rounds):
        gate = threading.Barrier(CONCURRENT)
        threads = [threading.Thread(target=one, args=(gate, cwd)) for cwd in workspaces]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for cwd in workspaces:
        os.rmdir(cwd)
    return times


def _phases(env: dict[str, str], runs: int) -> dict[str, float]:
    """Median ms of each traced phase over `runs` jailed launches."""
    seen: dict[str, list[float]] = {}
    for _ in range(runs):
        ran = subprocess.run([SHIM, "shell", "--", "/bin/true"], capture_output=True,
                             text=True, check=True, stdin=subprocess.DEVNULL,
                             env={**env, "CLAUDE_SANDBOX_TRACE": "1"})
        for line in ran.stderr.splitlines():
            # claude-sandbox: PART: NAME: X ms (total Y ms)
            parts = line.split(": ")
            if len(parts) < 4 or parts[0] != "claude-sandbox" or not parts[-1].endswith(
                    " ms)"):
                continue
            name = f"{parts[1]}: {': '.join(parts[2:-1])}"
            seen.setdefault(name, []).append(float(parts[-1].split()[0]))
    return {name: statistics.median(values) for name, values in seen.items()}


def root_against_user(user: str, runs: int) -> tuple[float, float]:
    """As root: medians of the same jailed launch as root and as `user`, interleaved."""
    entry = pwd.getpwnam(user)
    workspace = tempfile.mkdtemp(prefix="cs-bench-root-")
    os.chmod(workspace, 0o777)
    as_root = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    as_user = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": entry.pw_dir, "USER": user,
               "LANG": "C.UTF-8"}
    drop = ["/usr/bin/setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}",
            "--init-groups"]
    root, other = [], []
    try:
        for _ in range(3):
            _timed([SHIM, "shell", "--", "/bin/true"], as_root, workspace)
        for _ in range(runs):
            root.append(_timed([SHIM, "shell", "--", "/bin/true"], as_root, workspace))
            other.append(_timed([*drop, SHIM, "shell", "--", "/bin/true"], as_user, workspace))
    finally:
        os.rmdir(workspace)
    return statistics.median(root), statistics.median(other)


def _as_user(name: str) -> None:
    """Re-run this script as `name` (from root), with the same arguments."""
    entry = pwd.getpwnam(name)
    argv = list(sys.argv[1:])
    at = argv.index("--as")
    del argv[at : at + 2]
    os.chdir(entry.pw_dir)
    os.execve("/usr/bin/setpriv", [
        "setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups",
        sys.executable, os.path.abspath(__file__), *argv,
    ], {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": entry.pw_dir, "USER": name,
        "LANG": "C.UTF-8", "CS_BENCH_ROOT": os.environ.get("CS_BENCH_ROOT", "")})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="interleaved runs per row")
    parser.add_argument("--as", dest="user", help="as root: measure as this user")
    options = parser.parse_args()
    if sys.prefix != os.path.dirname(os.path.dirname(CORE_PYTHON)):
        # The installed core's own interpreter: it imports the code being measured.
        os.execv(CORE_PYTHON, [CORE_PYTHON, os.path.abspath(__file__), *sys.argv[1:]])
    if options.user and os.getuid() == 0:
        if "CS_BENCH_ROOT" not in os.environ:
            root, user = root_against_user(options.user, options.runs)
            os.environ["CS_BENCH_ROOT"] = f"{root:.1f} {user:.1f}"
        _as_user(options.user)
    import bench_jail  # claude_sandbox from the installed core when run by its python

    base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.path.expanduser("~"),
            "LANG": "C.UTF-8"}
    off = {**base, "CLAUDE_SANDBOX_EGRESS_JAIL": "0"}
    launch = [SHIM, "shell", "--", "/bin/true"]
    rows: dict[str, list[float]] = {name: [] for name in (
        "floor: bare bwrap", "floor: jailed", "python -I -c pass", "floor: the plan",
        "floor: plan + stage", "launch, jail off", "launch, jailed",
        "--version, direct", "--version, shim", "CPU: launcher, jailed",
        "CPU: interpreter start")}
    workspace = tempfile.mkdtemp(prefix="cs-bench-")
    os.chdir(workspace)
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):  # warm the caches and the agent's state store
            _timed(launch, base)
        for _ in range(options.runs):
            rows["floor: bare bwrap"].append(_timed(BWRAP_FLOOR, base))
            rows["floor: jailed"].append(1000 * bench_jail.floor_once(tmp))
            rows["python -I -c pass"].append(_timed([CORE_PYTHON, "-I", "-c", "pass"], base))
            rows["launch, jail off"].append(_timed(launch, off))
            rows["launch, jailed"].append(_timed(launch, base))
            rows["--version, direct"].append(_timed([REAL_CLAUDE, "--version"], base))
            rows["--version, shim"].append(_timed(["/usr/local/bin/claude", "--version"], base))
            rows["CPU: launcher, jailed"].append(
                _launcher_cpu(base, os.path.join(tmp, "cpu")))
            rows["CPU: interpreter start"].append(_start_cpu(base))
        floor = PlanFloor(off)
        for _ in range(options.runs):
            rows["floor: the plan"].append(floor.once(enter=False))
            rows["floor: plan + stage"].append(floor.once(enter=True))
    phases = _phases(base, options.runs)
    rounds = max(1, options.runs // 10)
    loaded = {"8 at once, jail off": concurrent(launch, off, rounds),
              "8 at once, jailed": concurrent(launch, base, rounds),
              "8 at once, jailed floor": _together(
                  lambda tmp: 1000 * bench_jail.floor_once(tmp), rounds)}
    memory = {"jailed": waiting_session(base), "jail off": waiting_session(off)}
    os.rmdir(workspace)

    median = {name: statistics.median(values) for name, values in rows.items()}
    user = pwd.getpwuid(os.getuid()).pw_name
    print(f"claude-sandbox launch cost: {options.runs} interleaved runs of /bin/true "
          f"as {user}, {os.cpu_count()} CPUs")
    print(f"| {'row':<22} | {'median ms':>9} | {'min ms':>7} |")
    print(f"|{'-' * 24}|{'-' * 11}|{'-' * 9}|")
    for name, values in rows.items():
        print(f"| {name:<22} | {median[name]:>9.1f} | {min(values):>7.1f} |")
    for name, values in loaded.items():
        print(f"| {name:<22} | {statistics.mean(values):>9.1f} | {max(values):>7.1f} |"
              "  (mean, worst)")
    extra = median["launch, jail off"] - median["floor: bare bwrap"]
    ratio = median["launch, jailed"] / median["floor: jailed"]
    print(f"jail off: bare bwrap floor + {extra:.1f} ms (target + {TARGET_EXTRA:.0f} ms): "
          f"{'met' if extra <= TARGET_EXTRA else 'NOT met'}")
    print(f"jailed: {ratio:.2f} x the jailed floor (target {TARGET_RATIO}): "
          f"{'met' if ratio <= TARGET_RATIO else 'NOT met'}")
    times8 = statistics.mean(loaded["8 at once, jailed"]) / median["launch, jailed"]
    print(f"8 at once, jailed: {times8:.2f} x one launch (target {TARGET_CONCURRENT}): "
          f"{'met' if times8 <= TARGET_CONCURRENT else 'NOT met'}")
    # The same ratio for the floor alone: the jail's own processes with no launcher. A
    # floor that spends as much CPU as it takes wall time cannot, on few cores, stay
    # under the target when eight start together (docs/adr/0004-launch-cost.md).
    floor8 = statistics.mean(loaded["8 at once, jailed floor"]) / median["floor: jailed"]
    print(f"8 at once, the jailed floor alone: {floor8:.2f} x one floor "
          f"(the launch's target {TARGET_CONCURRENT})")
    if os.environ.get("CS_BENCH_ROOT"):
        root, user = (float(x) for x in os.environ["CS_BENCH_ROOT"].split())
        print(f"root launch: {root:.1f} ms against {user:.1f} as "
              f"{pwd.getpwuid(os.getuid()).pw_name} (interleaved): +{root - user:.1f} ms "
              f"(target + {TARGET_ROOT_EXTRA:.0f}): "
              f"{'met' if root - user <= TARGET_ROOT_EXTRA else 'NOT met'}")
    print(f"| {'phase (jailed, median of ' + str(options.runs) + ')':<60} | {'ms':>6} | "
          f"{'budget':>6} |")
    for name, value in phases.items():
        budget = BUDGETS.get(name)
        mark = "" if budget is None else ("" if value <= budget else "  OVER")
        shown = "" if budget is None else f"{budget:.1f}"
        print(f"| {name[:60]:<60} | {value:>6.1f} | {shown:>6} |{mark}")
    print(f"the launcher's own CPU, jailed: {median['CPU: launcher, jailed']:.1f} ms, of it "
          f"the interpreter's start {median['CPU: interpreter start']:.1f} ms")
    added = median["--version, shim"] - median["--version, direct"]
    print(f"claude --version: the shim adds {added:.1f} ms (target + {TARGET_VERSION_EXTRA:.0f} "
          f"ms): {'met' if added <= TARGET_VERSION_EXTRA else 'NOT met'}")
    for kind, processes in memory.items():
        parts = ", ".join(f"{name} {rss // 1024}" for name, rss, _ in processes)
        rss = sum(r for _, r, _ in processes) / 1024
        anon = sum(a for _, _, a in processes) / 1024
        print(f"waiting session, {kind}: RSS {rss:.1f} MiB, of it anonymous {anon:.1f} MiB "
              f"({parts} MiB)")


if __name__ == "__main__":
    main()
