"""`AGENT --version` and `AGENT --help`: the agent's root-owned program, run without the
sandbox and with nothing the workspace, the home or the environment controls (check 94).

Building the sandbox costs about 300 ms; printing a version costs the program's own start.
These two questions read no project, run no tool and reach no network, so the answer is
the installed program's alone, as long as nothing else can take part:

- the program, and the interpreter its first line names (`#!/usr/bin/env node`), and every
  directory above each, belong to root and are writable by no one else; anything else
  (a user's own install, a group-writable directory) takes the sandboxed path instead;
- the environment is five fixed variables: a fixed PATH of root's directories, HOME and
  TMPDIR two new empty directories of its own (removed after, or swept by the next launch
  if this one is killed: jail/dirs.py), LANG, and TERM when it is a plain terminal name.
  No NODE_OPTIONS, LD_PRELOAD, BUN_* or config path reaches it;
- it runs in `/`, not the workspace, with only the three standard descriptors.

Any other argument, or any word added to these, launches the sandbox as always.
"""

from __future__ import annotations

import os

from claude_sandbox.core import paths
from claude_sandbox.core.paths import root_owned
from claude_sandbox.jail import dirs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

QUESTIONS = frozenset({("--version",), ("--help",)})
# Root's own directories only: what `#!/usr/bin/env node` finds here is root's.
FIXED_PATH = "/usr/local/bin:/usr/bin:/bin"


def _interpreter(program: str) -> str | None:
    """The program itself when it is not a script; else the interpreter its `#!` line
    names (through `/usr/bin/env NAME`, NAME as FIXED_PATH finds it); None when the line
    is anything else."""
    try:
        with open(program, "rb") as handle:
            head = handle.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return program
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if len(words) == 1 and words[0].startswith("/"):
        return words[0]
    if len(words) == 2 and words[0] == "/usr/bin/env" and "/" not in words[1]:
        for directory in FIXED_PATH.split(":"):
            found = os.path.join(directory, words[1])
            if os.path.isfile(found) and os.access(found, os.X_OK):
                return found if root_owned("/usr/bin/env") else None
    return None


def program(agent: str, args: tuple[str, ...]) -> str | None:
    """The agent's program when `args` is a question it may answer unsandboxed, and both
    it and its interpreter are root's alone; None otherwise (launch the sandbox)."""
    if args not in QUESTIONS or not agent or "/" in agent or agent.startswith("."):
        return None
    found = os.path.realpath(os.path.join(paths.REAL_BIN_DIR, agent))
    if not os.path.isfile(found) or not root_owned(found):
        return None
    interpreter = _interpreter(found)
    if interpreter is None or not root_owned(interpreter):
        return None
    return found


def environment(home: str, tmp: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The whole environment the program gets (pure)."""
    env = {"PATH": FIXED_PATH, "HOME": home, "TMPDIR": tmp, "LANG": "C.UTF-8"}
    term = environ.get("TERM", "")
    if term and len(term) < 64 and term.isascii() and term.replace("-", "").replace(
            ".", "").replace("+", "").isalnum():
        env["TERM"] = term
    return env


def answer(found: str, args: tuple[str, ...], environ: Mapping[str, str]) -> int:
    """Run `found` with `args` as the module docstring says; its exit status."""
    from claude_sandbox.core.process import fork_exec

    dirs.sweep_stale_dirs()
    private = dirs.make_private_dir()
    try:
        # Apart: codex will not make its helpers in a HOME under the temporary directory,
        # and says so on every start.
        home, tmp = os.path.join(private, "home"), os.path.join(private, "tmp")
        os.mkdir(home, 0o700)
        os.mkdir(tmp, 0o700)
        # Ends with the launcher, even SIGKILLed: no process outlives a launch.
        child = fork_exec([found, *args], environment(home, tmp, environ), {0: 0, 1: 1, 2: 2},
                          setsid=False, die_with_parent=True,
                          before_exec=lambda: os.chdir("/"))
        try:
            status = child.wait()
        except BaseException:
            child.kill()
            child.wait()
            raise
    finally:
        try:
            dirs.remove_dir(private)
        except OSError:
            pass  # what is left, the next launch's sweep removes (jail/dirs.py)
    return status if status >= 0 else 128 - status
