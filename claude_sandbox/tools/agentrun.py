"""Run the real agent CLIs non-interactively, for one prompt, against the local mock API.

Why: end-to-end tests need to see what a real agent did (ran a command, fired a hook)
without the internet. ``run_agent`` builds the argv, the environment and the few files each
agent needs to talk to ``claude_sandbox.tools.mockapi`` instead of its vendor, runs it in its own
process group and always leaves no process behind.

The environment is built from scratch, never inherited (the caller's ``env`` is laid on
top): an outer IS_SANDBOX, proxy or vendor key would otherwise change what the agent does.
Every agent gets PATH (the standard Debian one), HOME, USER/LOGNAME (the owner of HOME),
LANG=C.UTF-8, TERM=dumb, NO_PROXY/no_proxy=127.0.0.1,localhost and MOCKAPI_RUN_ID (a marker
to find stray processes by), and then:

claude (Claude Code, native binary)
    argv: ``claude -p PROMPT --output-format text --allowedTools Bash Write Edit``
    (``--allowedTools Bash`` lets Bash run without a prompt, root included;
    ``--dangerously-skip-permissions`` is refused as root unless IS_SANDBOX=1).
    env: ANTHROPIC_BASE_URL=mock url, ANTHROPIC_API_KEY=sk-ant-mock, DISABLE_TELEMETRY=1,
    DISABLE_ERROR_REPORTING=1, DISABLE_AUTOUPDATER=1, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
    (without it, it looks up api.anthropic.com even with a base URL set),
    CLAUDE_CODE_MAX_RETRIES=2 and API_TIMEOUT_MS=30000 (fail fast if the mock misbehaves).
    files: none needed; it writes ~/.claude.json and ~/.claude/ (projects/ holds the
    session transcript). This project's root-managed settings in /etc/claude-code (a
    UserPromptSubmit prompt gate in managed-settings.json; managed-settings.d/ drop-ins
    such as an apiKeyHelper that refuses) block or stall every run outside the sandbox:
    use ``without_managed_settings_prefix`` for an ungated run.
codex (OpenAI Codex CLI, node launcher of a native binary)
    argv: ``codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox
    --color never -m mock-model -c model_provider="mock" -c model_providers.mock={...,
    wire_api="responses", env_key="CODEX_MOCK_API_KEY", supports_websockets=false, no
    retries} -c analytics.enabled=false -c check_for_update_on_startup=false
    --disable plugins --disable remote_plugin --disable apps -- PROMPT``.
    Responses over HTTP+SSE is the only wire API codex accepts now (``wire_api="chat"`` is
    refused). Bypassing its own sandbox keeps codex from starting its bubblewrap/seccomp
    helper and runs the command at once; analytics and those three features off stop its
    look-ups of chatgpt.com, ab.chatgpt.com and api.github.com.
    env: CODEX_MOCK_API_KEY=mock-key.
    files: none needed (all config is on the command line); it writes ~/.codex/ (skills,
    sessions, logs, state) and warns that it will not create PATH aliases under /tmp.
pi (pi coding agent, node)
    argv: ``pi -p --provider mock --model mock-model PROMPT``.
    env: PI_OFFLINE=1, PI_TELEMETRY=0, PI_SKIP_VERSION_CHECK=1.
    files: ~/.pi/agent/models.json with a provider "mock" (written here, owned by HOME's
    owner) whose ``api`` is ``pi_api``: openai-completions (default), openai-responses or
    anthropic-messages. It writes ~/.pi/agent/auth.json and sessions/.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from claude_sandbox.launch.configure import profiles
from claude_sandbox.tools.mockapi import MockAPI
from claude_sandbox.tools.mockwire import MODEL

AGENTS = profiles.AGENT_NAMES
REAL_DIR = Path("/usr/libexec/claude-sandbox/real")
MANAGED_DIR = "/etc/claude-code"
MANAGED_SETTINGS = f"{MANAGED_DIR}/managed-settings.json"
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PI_APIS = ("openai-completions", "openai-responses", "anthropic-messages")
CODEX_KEY_VAR = "CODEX_MOCK_API_KEY"


def real_path(agent: str) -> str:
    """The vendor binary the installer left behind (the shims in /usr/local/bin wrap it)."""
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}; expected one of {AGENTS}")
    return str(REAL_DIR / agent)


def is_installed(agent: str) -> bool:
    return os.access(real_path(agent), os.X_OK)


def version(agent: str, timeout: float = 30) -> str:
    """`AGENT --version`, for test reports (no network, no HOME needed)."""
    out = subprocess.run([real_path(agent), "--version"], capture_output=True, text=True,
                         timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    return (out.stdout or out.stderr).strip()


def without_managed_settings_prefix() -> list[str]:
    """argv prefix: run the rest in a private mount namespace where Claude Code sees no
    managed settings (this project's prompt gate, its managed-settings.d drop-ins).

    An empty tmpfs covers the whole of /etc/claude-code there; root only, and nothing
    outside that namespace changes.
    """
    script = (
        "set -e; mount --make-rprivate /; "
        f"if [ -d {MANAGED_DIR} ]; then "
        f"mount -t tmpfs -o mode=0755,size=64k e2e-no-managed-settings {MANAGED_DIR}; fi; "
        'exec "$@"'
    )
    return ["unshare", "--mount", "sh", "-c", script, "sh"]


def as_user_prefix(user: str) -> list[str]:
    """argv prefix: drop to USER (uid, gid and its groups) for the rest. Root only."""
    entry = pwd.getpwnam(user)
    return ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups"]


def agent_argv(agent: str, prompt: str, api: MockAPI, *,
               extra_args: Sequence[str] = ()) -> list[str]:
    """The arguments after the program name, the prompt placed so that no option eats it
    (claude and pi take no prompt that starts with "-"; codex gets it after "--")."""
    if agent == "claude":
        # Its own file tools too: under brokered they are the agent's own process writing.
        return ["-p", prompt, "--output-format", "text", *extra_args,
                "--allowedTools", "Bash", "Write", "Edit"]
    if agent == "codex":
        provider = (
            f'{{name="mock", base_url={json.dumps(api.url + "/v1")}, '
            f'env_key="{CODEX_KEY_VAR}", wire_api="responses", '
            "supports_websockets=false, request_max_retries=0, stream_max_retries=0, "
            "stream_idle_timeout_ms=30000}"
        )
        return [
            "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
            "--color", "never", "-m", MODEL,
            "-c", 'model_provider="mock"', "-c", f"model_providers.mock={provider}",
            "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false",
            "--disable", "plugins", "--disable", "remote_plugin", "--disable", "apps",
            *extra_args, "--", prompt,
        ]
    if agent == "pi":
        return ["-p", "--provider", "mock", "--model", MODEL, *extra_args, prompt]
    raise ValueError(f"unknown agent {agent!r}; expected one of {AGENTS}")


def agent_env(agent: str, api: MockAPI, home: str) -> dict[str, str]:
    """The whole environment for AGENT (see the module docstring for why each is set)."""
    owner = _owner_name(home)
    env = {
        "PATH": STANDARD_PATH, "HOME": home, "USER": owner, "LOGNAME": owner,
        "LANG": "C.UTF-8", "TERM": "dumb", "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    if agent == "claude":
        env.update({
            "ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "sk-ant-mock",
            "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_MAX_RETRIES": "2", "API_TIMEOUT_MS": "30000",
        })
    elif agent == "codex":
        env[CODEX_KEY_VAR] = "mock-key"
    elif agent == "pi":
        env.update({"PI_OFFLINE": "1", "PI_TELEMETRY": "0", "PI_SKIP_VERSION_CHECK": "1"})
    else:
        raise ValueError(f"unknown agent {agent!r}; expected one of {AGENTS}")
    return env


def prepare_home(agent: str, api: MockAPI, home: str, *, pi_api: str = PI_APIS[0],
                 api_key: str = "mock-key") -> None:
    """Write the files AGENT needs in HOME (only pi needs one), owned by HOME's owner.
    `api_key`: pi's apiKey, a literal or the name of a variable holding it."""
    if agent != "pi":
        return
    if pi_api not in PI_APIS:
        raise ValueError(f"unknown pi api {pi_api!r}; expected one of {PI_APIS}")
    agent_dir = Path(home, ".pi", "agent")
    agent_dir.mkdir(parents=True, exist_ok=True)
    models_file = agent_dir / "models.json"
    models = json.loads(models_file.read_text()) if models_file.exists() else {}
    # The Anthropic SDK appends /v1/messages itself; the OpenAI ones append to .../v1.
    base = api.url if pi_api == "anthropic-messages" else api.url + "/v1"
    models.setdefault("providers", {})["mock"] = {
        "baseUrl": base, "api": pi_api, "apiKey": api_key,
        "models": [{"id": MODEL, "name": "Mock Model", "reasoning": False, "input": ["text"],
                    "contextWindow": 128000, "maxTokens": 16384}],
    }
    models_file.write_text(json.dumps(models, indent=2) + "\n")
    st = os.stat(home)
    if os.geteuid() == 0:
        for path in (Path(home, ".pi"), agent_dir, models_file):
            os.chown(path, st.st_uid, st.st_gid)


def run_agent(
    agent: str,
    prompt: str,
    *,
    api: MockAPI,
    home: str,
    cwd: str,
    argv_prefix: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 180,
    program: str | None = None,
    extra_args: Sequence[str] = (),
    pi_api: str = PI_APIS[0],
) -> subprocess.CompletedProcess[str]:
    """Run AGENT once for PROMPT against API and return what it printed and its status.

    The program is the real binary, or with an ``argv_prefix`` (e.g. a sandbox launcher)
    the bare agent name, unless ``program`` says otherwise. Raises TimeoutExpired after
    ``timeout`` seconds, having killed the whole process group and every stray process
    that carries this run's marker.
    """
    prepare_home(agent, api, home, pi_api=pi_api)
    if program is None:
        program = agent if argv_prefix else real_path(agent)
    argv = [*argv_prefix, program,
            *agent_argv(agent, prompt, api, extra_args=extra_args)]
    run_id = uuid.uuid4().hex
    full_env = {**agent_env(agent, api, home), **(env or {}), "MOCKAPI_RUN_ID": run_id}
    proc = subprocess.Popen(
        argv, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    readers = [_Reader(proc.stdout), _Reader(proc.stderr)]
    finished = _wait_unreaped(proc.pid, timeout)
    # The leader is alive or a zombie here, so its process group id cannot have been
    # reused: killing the group hits only what this run started.
    _kill_group(proc.pid)
    proc.wait()
    reap(run_id)
    stdout, stderr = (reader.text() for reader in readers)
    if not finished:
        raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


class _Reader:
    """Drains one pipe in a thread, so a chatty agent never blocks on a full pipe."""

    def __init__(self, pipe: IO[str] | None) -> None:
        self._chunks: list[str] = []
        self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self._thread.start()

    def _drain(self, pipe: IO[str] | None) -> None:
        if pipe is None:
            return
        with pipe:
            for chunk in iter(lambda: pipe.read(4096), ""):
                self._chunks.append(chunk)

    def text(self, timeout: float = 5.0) -> str:
        self._thread.join(timeout)
        return "".join(self._chunks)


def _wait_unreaped(pid: int, timeout: float) -> bool:
    """Wait until PID exits without reaping it; False when TIMEOUT passed first."""
    deadline = time.monotonic() + timeout
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def stray_processes(env_entry: str) -> list[int]:
    """PIDs alive whose environment holds ENV_ENTRY ("KEY=VALUE"), daemons included."""
    needle = env_entry.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def reap(run_id: str, grace: float = 2.0) -> None:
    """Kill whatever of this run outlived the agent (a session-leaving daemon, too)."""
    deadline = time.monotonic() + grace
    while (pids := stray_processes(f"MOCKAPI_RUN_ID={run_id}")) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _owner_name(path: str) -> str:
    uid = os.stat(path).st_uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
