"""Time to the first prompt, sandboxed and direct, for each agent (not a test).

Each agent's real CLI is started through a pty, as a person starts it, and timed from
the start until its input prompt shows: claude's and codex's "for shortcuts" line,
pi's "clear/exit" help line. The pty answers the terminal queries the TUIs send (the
cursor position, the device attributes, the colours), as a terminal emulator would;
without answers codex waits seconds for them.

  direct      the real binary (/usr/libexec/claude-sandbox/agents/bin/AGENT)
  sandboxed   the shim a person types (/usr/local/bin/AGENT), jail on

Both rows run the same way: in a private mount namespace whose
/etc/claude-sandbox.conf is the bench's own (a state-dir of its own, so no store of
the user's is touched; pass-env for the fake keys, so each agent goes straight to its
prompt), then as the user. Each agent is configured alike in the direct home and in
its store (onboarding done, the workspace trusted, a provider that is never called:
nothing is sent before a prompt). Rows are interleaved run by run. Target (issue
"Developers don't notice the sandbox"): the sandbox adds at most 150 ms, as a user
and as root.

    sudo flock /tmp/claude-sandbox-ns.lock python3 bench/bench_prompt.py \\
        [--runs N] [--as USER]... [--agents claude,codex,pi]
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import pwd
import re
import select
import shutil
import statistics
import struct
import tempfile
import time

AGENTS_BIN = "/usr/libexec/claude-sandbox/agents/bin"
SHIM_DIR = "/usr/local/bin"
TARGET_MS = 150.0
TIMEOUT = 20.0
KEY = "sk-ant-api03-" + "bench" * 8
MARKERS = {"claude": rb"for\s*shortcuts", "codex": rb"for\s*shortcuts", "pi": rb"clear/exit"}
# What a terminal emulator answers to the queries the TUIs send at start.
ANSWERS = ((b"\x1b[6n", b"\x1b[1;1R"), (b"\x1b[c", b"\x1b[?62;22c"), (b"\x1b[?u", b"\x1b[?0u"),
           (b"\x1b]10;?", b"\x1b]10;rgb:ffff/ffff/ffff\x1b\\"),
           (b"\x1b]11;?", b"\x1b]11;rgb:0000/0000/0000\x1b\\"))
ENV = {
    "claude": {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"},
    "codex": {"CODEX_MOCK_API_KEY": "bench"},
    "pi": {"ANTHROPIC_API_KEY": KEY, "PI_OFFLINE": "1", "PI_TELEMETRY": "0",
           "PI_SKIP_VERSION_CHECK": "1"},
}
CONFIG = "".join(f"pass-env = {name}\n" for name in sorted({n for e in ENV.values() for n in e}))
_ESCAPES = re.compile(rb"\x1b\[[0-9;?<>=$]*[a-zA-Z~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def agent_files(agent: str, workspace: str) -> dict[str, str]:
    """The settings that take each agent straight to its prompt in `workspace`."""
    if agent == "claude":
        return {".claude.json": json.dumps({
            "hasCompletedOnboarding": True, "theme": "dark",
            "customApiKeyResponses": {"approved": [KEY[-20:]], "rejected": []},
            "projects": {workspace: {"hasTrustDialogAccepted": True,
                                     "hasCompletedProjectOnboarding": True}}})}
    if agent == "codex":
        return {".codex/config.toml": (
            'model = "mock-model"\nmodel_provider = "mock"\n'
            "check_for_update_on_startup = false\n[analytics]\nenabled = false\n"
            '[model_providers.mock]\nname = "mock"\nbase_url = "http://127.0.0.1:9/v1"\n'
            'wire_api = "responses"\nenv_key = "CODEX_MOCK_API_KEY"\n'
            f'[projects."{workspace}"]\ntrust_level = "trusted"\n')}
    return {}


def write_files(home: str, files: dict[str, str], user: pwd.struct_passwd) -> None:
    for relative, text in files.items():
        path = os.path.join(home, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    for top, dirs, names in os.walk(home):
        for name in [*dirs, *names]:
            os.lchown(os.path.join(top, name), user.pw_uid, user.pw_gid)


def first_prompt(argv: list[str], env: dict[str, str], cwd: str, marker: bytes,
                 timeout: float = TIMEOUT) -> float:
    """Milliseconds from the start until `marker` shows in the pty; the process group is
    killed after."""
    start = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    import fcntl
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    seen = b""
    pattern = re.compile(marker)
    try:
        while time.perf_counter() - start < timeout:
            if not select.select([fd], [], [], 0.5)[0]:
                continue
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            for query, answer in ANSWERS:
                if query in data:
                    os.write(fd, answer)
            seen = (seen + data)[-65536:]
            if pattern.search(_ESCAPES.sub(b"", seen)):
                return (time.perf_counter() - start) * 1000
        raise RuntimeError(f"{argv[-1]}: no prompt in {timeout:.0f} s; it showed: "
                           f"{_ESCAPES.sub(b'', seen)[-400:]!r}")
    finally:
        os.close(fd)  # the terminal hangs up, as when a window closes
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
            time.sleep(0.05)
        else:
            try:
                os.killpg(pid, 9)  # pty.fork made the child a session (and group) leader
                os.waitpid(pid, 0)
            except OSError:
                pass


def wrapped(command: list[str], conf: str, user: pwd.struct_passwd) -> list[str]:
    """The bench's configuration in a private mount namespace, then the user."""
    become = [] if user.pw_uid == 0 else [shutil.which("setpriv") or "setpriv",
                                          f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                                          "--init-groups"]
    script = f"mount --bind {conf} /etc/claude-sandbox.conf && exec \"$@\""
    return [shutil.which("unshare") or "unshare", "-m", "--propagation", "private",
            "/bin/sh", "-c", script, "sh", *become, *command]


def bench_user(user: pwd.struct_passwd, agents: list[str], runs: int, base: str,
               conf: str, state: str) -> list[tuple[str, str, list[float], list[float]]]:
    workspace = os.path.join(base, f"ws-{user.pw_name}")
    home = os.path.join(base, f"home-{user.pw_name}")
    for path in (workspace, home, os.path.join(state, str(user.pw_uid))):
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chown(path, user.pw_uid, user.pw_gid)
    common = {"PATH": "/usr/local/bin:/usr/bin:/bin", "TERM": "xterm-256color",
              "LANG": "C.UTF-8", "USER": user.pw_name, "LOGNAME": user.pw_name}
    for agent in agents:
        write_files(home, agent_files(agent, workspace), user)
    times: dict[tuple[str, str], list[float]] = {}
    for run in range(runs + 1):  # the first round is a warm-up: it makes the stores
        for agent in agents:
            env = {**common, **ENV[agent]}
            marker = MARKERS[agent]
            for row, argv, row_env in (
                    ("direct", [os.path.join(AGENTS_BIN, agent)], {**env, "HOME": home}),
                    ("sandboxed", [os.path.join(SHIM_DIR, agent)], {**env, "HOME": user.pw_dir})):
                if run:
                    took = first_prompt(wrapped(argv, conf, user), row_env, workspace, marker)
                    times.setdefault((agent, row), []).append(took)
                    continue
                # The warm-up: the first launch makes the store (its import shows the
                # onboarding the real home left undone); then the same settings there.
                try:
                    first_prompt(wrapped(argv, conf, user), row_env, workspace, marker, 8.0)
                except RuntimeError:
                    pass
                if row == "sandboxed":
                    store_home = os.path.join(state, str(user.pw_uid), agent, "home")
                    write_files(store_home, agent_files(agent, workspace), user)
    return [(agent, user.pw_name, times[(agent, "direct")], times[(agent, "sandboxed")])
            for agent in agents]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--as", dest="users", action="append",
                        help="a user to run as (repeatable); default: root and sbxuser")
    parser.add_argument("--agents", default="claude,codex,pi")
    args = parser.parse_args()
    if os.getuid() != 0:
        raise SystemExit("bench_prompt: run as root (it binds its own configuration)")
    users = [pwd.getpwnam(name) for name in (args.users or ["root", "sbxuser"])]
    agents = [a for a in args.agents.split(",") if a]
    base = tempfile.mkdtemp(prefix="csbx-bench-prompt-", dir="/var/tmp")
    os.chmod(base, 0o755)
    state = os.path.join(base, "state")
    os.mkdir(state, 0o755)
    conf = os.path.join(base, "claude-sandbox.conf")
    with open(conf, "w", encoding="utf-8") as handle:
        handle.write(f"state-dir = {state}\n{CONFIG}")
    os.chmod(conf, 0o644)
    rows = []
    try:
        for user in users:
            rows += bench_user(user, agents, args.runs, base, conf, state)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"time to the first prompt, median of {args.runs} (ms); target: the sandbox adds "
          f"at most {TARGET_MS:.0f} ms")
    # `paired`: the median of each run's difference, and the spread of the direct
    # times: pi's own start moves by hundreds of milliseconds between runs, which the
    # difference of the medians (the target's figure) carries whole.
    print(f"{'agent':<8}{'user':<10}{'direct':>9}{'sandboxed':>11}{'added':>9}  met"
          f"{'paired':>9}{'direct min-max':>17}")
    for agent, user_name, direct, sandboxed in rows:
        d, s = statistics.median(direct), statistics.median(sandboxed)
        paired = statistics.median(b - a for a, b in zip(direct, sandboxed, strict=True))
        print(f"{agent:<8}{user_name:<10}{d:9.0f}{s:11.0f}{s - d:9.0f}  "
              f"{'yes' if s - d <= TARGET_MS else 'NO ':<3}{paired:9.0f}"
              f"{f'{min(direct):.0f}-{max(direct):.0f}':>17}")


if __name__ == "__main__":
    main()
