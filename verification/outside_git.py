"""Checks 98, 99, 100 and 106, run outside.

Check 98: in a live session the agent plants what the user's own git would run (ADR
0010's amendments of 2026-12-06), and git run outside afterwards runs none.

- a repository in a subdirectory, as git's own test reads one (HEAD a link to refs/),
  whose config sets core.fsmonitor: `git status` there;
- a repository inside a control directory (docs/.vscode/x), with core.fsmonitor:
  `git status` there;
- remote.origin.pushurl naming a repository the agent made in its own home, with a
  pre-receive hook: `git push`;
- an index entry at .git/hooks/post-checkout: `git restore .`;
- a `.git` file repointed at a repository the agent made in its own home, with
  core.worktree and core.fsmonitor: `git status` (a second workspace, whose git
  directory is a separate one inside it).

Each plant writes a line to a directory outside the sandbox when it runs; the check
passes when that directory stays empty. The plants are made by Python inside: no shell
quoting between here and there.

Check 99: a control file the session commits or stages does not reach the worktree
through the user's own git (ADR 0010's amendment of 2026-12-06, second; gitcontrol.py).

Check 100: no ref the session moved is written naming objects the repository lacks
(ADR 0010's amendment of 2026-12-06, third; gitbase.py's History.complete), so that
git fsck, gc and for-each-ref outside keep working.

Check 106: a link a session leaves on the way to a git directory the workspace's `.git`
file names (the directory above it renamed, a link to another repository in its place)
leads neither the session's end nor the next launch there, and a repository the session
puts in its place runs nothing of its own outside (gitsession.finish,
gitrepo.link_on_the_way).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping

from outside import Result, _git, _launch_in, _scratch_repository

_PLANTS = r'''
import hashlib, os, struct, subprocess, sys
marks, outside_home = sys.argv[1], sys.argv[2]

def git(*argv, stdin=None):
    return subprocess.run(["git", *argv], input=stdin, capture_output=True, text=True,
                          check=True).stdout.strip()

def hook(path, name):
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\necho ran >> {marks}/{name}\n")
    os.chmod(path, 0o755)

# A repository in src/: HEAD a link to refs/, objects/ and refs/, a config with fsmonitor.
os.makedirs("src/objects")
os.makedirs("src/refs")
os.symlink("refs/heads/main", "src/HEAD")
with open("src/config", "w") as f:
    f.write("[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n"
            f'\tfsmonitor = "echo ran >> {marks}/bare; false"\n')
# A repository inside a control directory: named as one, it must still be checked.
os.makedirs("docs/.vscode/x")
git("init", "-q", "docs/.vscode/x")
with open("docs/.vscode/x/.git/config", "a") as f:
    f.write(f'[core]\n\tfsmonitor = "echo ran >> {marks}/control; false"\n')
# A push URL to a repository in the agent's home, as the user sees that home outside.
git("init", "-q", "--bare", os.path.join(os.environ["HOME"], "csbx-verify-push.git"))
hook(os.path.join(os.environ["HOME"], "csbx-verify-push.git", "hooks", "pre-receive"), "push")
git("config", "remote.origin.pushurl", os.path.join(outside_home, "csbx-verify-push.git"))
# An index whose second entry is a hook: git's restore outside would write it and run it.
blob = git("hash-object", "-w", "--stdin", stdin=f"#!/bin/sh\necho ran >> {marks}/index\n")

def entry(path, oid, mode):
    e = struct.pack(">10I", 0, 0, 0, 0, 0, 0, mode, os.getuid(), os.getgid(), 0)
    e += bytes.fromhex(oid) + struct.pack(">H", len(path)) + path
    return e + b"\0" * (8 - len(e) % 8)

rows = sorted([(b".git/hooks/post-checkout", blob, 0o100755),
               (b"app.txt", git("rev-parse", "HEAD:app.txt"), 0o100644)])
body = b"DIRC" + struct.pack(">II", 2, len(rows)) + b"".join(entry(*r) for r in rows)
with open(".git/index", "wb") as f:
    f.write(body + hashlib.sha1(body).digest())
print("made")
'''

_REPOINT = r'''
import os, subprocess, sys
marks, outside_home, workspace = sys.argv[1], sys.argv[2], os.getcwd()
evil = os.path.join(os.environ["HOME"], "csbx-verify-gitfile.git")
subprocess.run(["git", "init", "-q", "--bare", evil], check=True)
with open(os.path.join(evil, "config"), "a") as f:
    f.write(f'[core]\n\tbare = false\n\tworktree = {workspace}\n'
            f'\tfsmonitor = "echo ran >> {marks}/gitfile; false"\n')
with open(".git", "w") as f:
    f.write(f"gitdir: {os.path.join(outside_home, 'csbx-verify-gitfile.git')}\n")
print("made")
'''


def _scratch(home: str, separate: bool) -> str:
    """A repository with one commit and a network remote; `separate`: its git directory
    is `.csbx-gitdir` inside it, and `.git` a file naming it."""
    repo = tempfile.mkdtemp(prefix="csbx-verify-git98-", dir="/var/tmp")
    extra = ["--separate-git-dir", os.path.join(repo, ".csbx-gitdir")] if separate else []
    _git(["init", "-q", "-b", "main", *extra], repo, home)
    with open(os.path.join(repo, "app.txt"), "w", encoding="utf-8") as handle:
        handle.write("app\n")
    for argv in (["add", "app.txt"], ["commit", "-qm", "app"],
                 ["remote", "add", "origin", "https://csbx-verify.invalid/r.git"]):
        _git(argv, repo, home)
    return repo


def check_98_git_plants_run_nothing_outside(shim: str, agent: str, home: str,
                                            store_home: str,
                                            environ: Mapping[str, str]) -> Result:
    """A live session plants a repository in a subdirectory, a local push URL, a hook in
    the index and a repointed `.git` file; git run outside afterwards runs none of them."""
    marks = tempfile.mkdtemp(prefix="csbx-verify-marks98-", dir="/var/tmp")
    repos = [_scratch(home, separate=False), _scratch(home, separate=True)]
    live = {**environ, "CLAUDE_SANDBOX_WORKSPACE_MODE": "live"}
    try:
        for repo, plants in zip(repos, (_PLANTS, _REPOINT), strict=True):
            with open(os.path.join(repo, ".csbx-plant.py"), "w", encoding="utf-8") as handle:
                handle.write(plants)
            made = _launch_in(shim, agent, repo, live,
                              f"/usr/bin/python3 .csbx-plant.py {marks} {store_home}")
            if "made" not in made.stdout:
                return Result("98", "FAIL", f"the session could not plant: {made.stderr[-300:]}")
        first, second = repos
        _git(["status"], os.path.join(first, "src"), home)
        _git(["status"], os.path.join(first, "docs", ".vscode", "x"), home)
        _git(["push", "-q", "origin", "main"], first, home)
        _git(["restore", "."], first, home)
        _git(["status"], second, home)
        ran = sorted(os.listdir(marks))
        hook = os.path.lexists(os.path.join(first, ".git", "hooks", "post-checkout"))
    finally:
        for path in (marks, *repos):
            shutil.rmtree(path, ignore_errors=True)
        for name in ("csbx-verify-push.git", "csbx-verify-gitfile.git"):
            shutil.rmtree(os.path.join(store_home, name), ignore_errors=True)
    if ran or hook:
        return Result("98", "FAIL", f"ran outside: {', '.join(ran) or 'nothing'}; the index's "
                      f"hook written into .git: {hook}")
    return Result("98", "PASS", "git status, push and restore outside ran none of a "
                  "subdirectory repository, one in a control directory, a local push URL, a "
                  "hook in the index and a repointed .git file")


# Check 99's plants: a commit of a control file the agent cannot write in the worktree
# (.envrc is bound read-only, .husky is not there), made with git's own plumbing, and a
# staged copy of .envrc on top of it. Each file's content writes a mark when it runs.
_COMMITTED = r'''
import os, subprocess, sys
marks = sys.argv[1]

def git(*argv, stdin=None):
    return subprocess.run(["git", *argv], input=stdin, capture_output=True, text=True,
                          check=True).stdout.strip()

hook = git("hash-object", "-w", "--stdin", stdin=f"#!/bin/sh\necho ran >> {marks}/husky\n")
git("update-index", "--add", "--cacheinfo", f"100755,{hook},.husky/pre-commit")
git("commit", "-q", "-m", "tooling")
envrc = git("hash-object", "-w", "--stdin", stdin=f"echo ran >> {marks}/envrc\n")
git("update-index", "--cacheinfo", f"100644,{envrc},.envrc")
print("made")
'''


def check_99_control_files_do_not_come_out_through_git(shim: str, agent: str, home: str,
                                                       environ: Mapping[str, str]) -> Result:
    """A live session commits .husky/pre-commit and stages a new .envrc; afterwards the
    branch outside has not moved, and the user's `git checkout .` and `git reset --hard`
    write neither into the worktree."""
    marks = tempfile.mkdtemp(prefix="csbx-verify-marks99-", dir="/var/tmp")
    repo = _scratch(home, separate=False)
    live = {**environ, "CLAUDE_SANDBOX_WORKSPACE_MODE": "live"}
    try:
        with open(os.path.join(repo, ".envrc"), "w", encoding="utf-8") as handle:
            handle.write("export APP=1\n")
        for argv in (["add", ".envrc"], ["commit", "-qm", "envrc"]):
            _git(argv, repo, home)
        before = _git(["rev-parse", "main"], repo, home).stdout.strip()
        with open(os.path.join(repo, ".csbx-plant.py"), "w", encoding="utf-8") as handle:
            handle.write(_COMMITTED)
        made = _launch_in(shim, agent, repo, live, f"/usr/bin/python3 .csbx-plant.py {marks}")
        if "made" not in made.stdout:
            return Result("99", "FAIL", f"the session could not plant: {made.stderr[-300:]}")
        after = _git(["rev-parse", "main"], repo, home).stdout.strip()
        held = _git(["rev-parse", "-q", "--verify", "refs/claude-sandbox/held/heads/main"],
                    repo, home).returncode == 0
        _git(["checkout", "--", "."], repo, home)
        _git(["reset", "-q", "--hard"], repo, home)
        out = [name for name in (".envrc", ".husky/pre-commit")
               if marks in _read(os.path.join(repo, name))]
    finally:
        for path in (marks, repo):
            shutil.rmtree(path, ignore_errors=True)
    if after != before or out or not held:
        return Result("99", "FAIL", f"main moved: {after != before}; in the worktree after "
                      f"checkout and reset: {', '.join(out) or 'neither'}; the session's "
                      f"value held: {held}")
    return Result("99", "PASS", "a committed .husky/pre-commit and a staged .envrc stayed "
                  "out of the branch and the index; checkout and reset outside wrote neither")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


# Check 100's plants: a branch at a made-up id, and a commit on main whose new blob the
# session then removes from its object store (git log reads its tree, not the blob). And
# a whole commit on a new branch, which must come out: a product that moved nothing would
# pass the rest.
_INCOMPLETE = r"""
import os, subprocess

def git(*argv):
    return subprocess.run(["git", *argv], capture_output=True, text=True,
                          check=True).stdout.strip()

git("checkout", "-qb", "whole")
with open("whole.txt", "w") as f:
    f.write("csbx-verify-100: a whole commit\n")
git("add", "whole.txt")
git("commit", "-qm", "whole")
whole = git("rev-parse", "HEAD")
git("checkout", "-q", "main")
made_up = "c0ffee" * 6 + "c0ff"
with open(os.path.join(".git", "refs", "heads", "made-up"), "w") as f:
    f.write(made_up + "\n")
with open("new.txt", "w") as f:
    f.write("csbx-verify-100: a blob the session removes\n")
git("add", "new.txt")
git("commit", "-qm", "new")
blob = git("rev-parse", "HEAD:new.txt")
os.unlink(os.path.join(".git", "objects", blob[:2], blob[2:]))
print("made", made_up, git("rev-parse", "HEAD"), whole)
"""


def check_100_refs_name_only_objects_held(shim: str, agent: str, home: str,
                                          environ: Mapping[str, str]) -> Result:
    """A live session points a branch at a made-up id and commits on main a blob it then
    removes; afterwards neither ref moved, every ref's history is whole, and the launch
    said both values."""
    repo = _scratch(home, separate=False)
    live = {**environ, "CLAUDE_SANDBOX_WORKSPACE_MODE": "live"}
    try:
        before = _git(["rev-parse", "main"], repo, home).stdout.strip()
        with open(os.path.join(repo, ".csbx-plant.py"), "w", encoding="utf-8") as handle:
            handle.write(_INCOMPLETE)
        made = _launch_in(shim, agent, repo, live, "/usr/bin/python3 .csbx-plant.py")
        values = made.stdout.split()[1:4] if made.stdout.startswith("made ") else []
        if len(values) != 3:
            return Result("100", "FAIL", f"the session could not plant: {made.stderr[-300:]}")
        whole = values.pop()
        came = _git(["rev-parse", "-q", "--verify", "refs/heads/whole"], repo, home)
        after = _git(["rev-parse", "main"], repo, home).stdout.strip()
        refs = _git(["for-each-ref", "--format=%(objectname)"], repo, home)
        complete = _git(["rev-list", "--objects", "--all"], repo, home).returncode == 0
        fsck = _git(["fsck", "--connectivity-only", "--no-dangling"], repo, home).returncode
        named = [v for v in values if v in refs.stdout]
        said = all(v in made.stderr for v in values)
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    moved = came.stdout.strip() == whole
    if after != before or named or refs.returncode or not complete or fsck or not said \
            or not moved:
        return Result("100", "FAIL", f"main moved: {after != before}; refs naming the "
                      f"session's values: {', '.join(named) or 'none'}; for-each-ref, "
                      f"rev-list --objects --all and fsck exit {refs.returncode}, "
                      f"{int(not complete)}, {fsck}; both values said: {said}; the whole "
                      f"commit's branch came out: {moved}")
    return Result("100", "PASS", "a branch at a made-up id and a commit missing its blob "
                  "moved no ref, while a whole commit's new branch came out; every ref's "
                  "history is whole, fsck passes, and the launch named both values")


def check_106_git_directory_not_reached_through_a_link(shim: str, agent: str, home: str,
                                                       environ: Mapping[str, str]) -> Result:
    """A workspace whose .git file names meta/.git; the session sets its remote's URL,
    renames meta and links another repository there: that repository's config is
    unchanged, and the next launch there is refused with 77."""
    other = _scratch_repository(home)
    workspace = tempfile.mkdtemp(prefix="csbx-verify-git106-", dir="/var/tmp")
    try:
        os.mkdir(os.path.join(workspace, "meta"))
        for argv in (["init", "-q", "-b", "main", f"--separate-git-dir={workspace}/meta/.git"],
                     ["remote", "add", "origin", "https://example.com/own.git"]):
            _git(argv, workspace, home)
        config = _read(os.path.join(other, ".git", "config"))
        session = _launch_in(shim, agent, workspace, environ,
                             "git remote set-url origin https://evil.example.com/x.git && "
                             f"mv meta meta.moved && ln -s {other} meta")
        changed = _read(os.path.join(other, ".git", "config")) != config
        again = _launch_in(shim, agent, workspace, environ, "true")
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)
    if session.returncode != 0:
        return Result("106", "FAIL", f"the session failed: {session.stderr[-300:]}")
    if changed:
        return Result("106", "FAIL", "the session's end wrote another repository's config "
                      "through a link the session left on the way to its git directory")
    if again.returncode != 77:
        return Result("106", "FAIL", f"the next launch, with the link there, ended "
                      f"{again.returncode}, not refused (77): {again.stderr[-300:]}")
    ran = _replaced_repository_runs(shim, agent, home, environ)
    if ran:
        return Result("106", "FAIL", f"a repository the session put in the git directory's "
                      f"place: git outside ran {ran}")
    return Result("106", "PASS", "a link on the way to the git directory: nothing applied "
                  "through it, and the next launch refused (77); a repository put in its "
                  "place: git outside ran neither its hook nor its fsmonitor")


def _replaced_repository_runs(shim: str, agent: str, home: str,
                              environ: Mapping[str, str]) -> list[str]:
    """A session renames meta and makes a repository of its own at meta/.git, with a
    pre-commit hook and core.fsmonitor; what of them `git status` and `git commit`
    outside ran."""
    workspace = tempfile.mkdtemp(prefix="csbx-verify-git106b-", dir="/var/tmp")
    marks = tempfile.mkdtemp(prefix="csbx-verify-marks106-", dir="/var/tmp")
    try:
        os.mkdir(os.path.join(workspace, "meta"))
        _git(["init", "-q", "-b", "main", f"--separate-git-dir={workspace}/meta/.git"],
             workspace, home)
        _launch_in(shim, agent, workspace, environ,
                   "mv meta meta.x && mkdir meta && git init -q --bare meta/.git && "
                   "git -C meta/.git config core.bare false && "
                   f"git -C meta/.git config core.fsmonitor 'touch {marks}/fsmonitor; false'"
                   f" && printf '#!/bin/sh\\ntouch {marks}/hook\\n' > "
                   "meta/.git/hooks/pre-commit && chmod +x meta/.git/hooks/pre-commit")
        _git(["status"], workspace, home)
        _git(["commit", "-q", "--allow-empty", "-m", "after"], workspace, home)
        return sorted(os.listdir(marks))
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.rmtree(marks, ignore_errors=True)
