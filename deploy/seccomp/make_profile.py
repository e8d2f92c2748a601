#!/usr/bin/env python3
"""The container's seccomp profile for claude-sandbox: the engine's default, plus the calls
that build the sandbox's namespaces, and nothing else.

Docker's default profile allows `unshare`, `clone` with namespace flags, `setns`, `mount`,
`umount2` and `mount_setattr` only to a process with CAP_SYS_ADMIN, and some engine versions
do not allow `pivot_root` at all. A default `docker run` has no CAP_SYS_ADMIN, so every
launch stops with exit 69. This script reads the engine's own default profile and writes it
again with one rule added: those calls allowed, whatever the capabilities. Every other rule
of the default is kept as it was, in its order: what the engine refuses stays refused.

    python3 make_profile.py DEFAULT.json > claude-sandbox-seccomp.json
    python3 make_profile.py - < DEFAULT.json > claude-sandbox-seccomp.json
    docker run --security-opt seccomp=claude-sandbox-seccomp.json ...

DEFAULT.json is the default profile of the engine that runs the container, at its version
(Docker's is `profiles/seccomp/default.json` in the moby repository, at the engine's
release tag). Why a profile is made here rather than kept in this repository, and what the
rule costs: docs/how-to/docker.md and docs/adr/0016-docker-seccomp-profile.md.

Standard library only: it runs on the host, where claude-sandbox is not installed.
"""

from __future__ import annotations

import json
import sys

MARK = "claude-sandbox"
# Each call the sandbox needs, and who makes it. A call the default already allows to
# every process is not added again.
SANDBOX_CALLS = {
    "unshare": "bwrap and the jail's namespace holder make the sandbox's namespaces",
    "clone": "bwrap starts the sandbox's first process in new namespaces (CLONE_NEW* flags)",
    "setns": "pasta and the late-mount helper join the jail's and the sandbox's namespaces",
    "mount": "bwrap builds the sandbox's view of the file system; the jail mounts overlays",
    "umount2": "bwrap lets go of the old root",
    "pivot_root": "bwrap and pasta switch to their own root",
    "mount_setattr": "harsh and brokered make every writable mount of the sandbox noexec",
}


class ProfileError(ValueError):
    """The input is not an engine's seccomp profile this script knows how to extend."""


def _allowed_to_all(profile: dict[str, object]) -> set[str]:
    """The calls a rule allows to every process on every architecture: no condition on
    arguments, capabilities, architecture or kernel."""
    found: set[str] = set()
    for rule in profile["syscalls"]:  # type: ignore[attr-defined]
        if (rule.get("action") == "SCMP_ACT_ALLOW" and not rule.get("args")
                and not rule.get("includes") and not rule.get("excludes")):
            found.update(rule.get("names", []))
    return found


def check(profile: object) -> dict[str, object]:
    """`profile` as an engine's default: a deny-by-default filter with a list of rules."""
    if not isinstance(profile, dict):
        raise ProfileError("not a seccomp profile: the document is not a JSON object")
    action = profile.get("defaultAction")
    if action not in ("SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS",
                      "SCMP_ACT_KILL_THREAD", "SCMP_ACT_TRAP"):
        raise ProfileError(f"defaultAction is {action!r}: only a profile that refuses what it "
                           "does not name can be extended by allowing a few calls")
    rules = profile.get("syscalls")
    if not isinstance(rules, list) or not all(
            isinstance(r, dict) and isinstance(r.get("names"), list)
            and all(isinstance(n, str) for n in r["names"]) for r in rules):
        raise ProfileError("not a seccomp profile: `syscalls` is not a list of rules with names")
    if any(isinstance(r.get("comment"), str) and r["comment"].startswith(MARK) for r in rules):
        raise ProfileError(f"this profile already has the {MARK} rule: give the engine's "
                           "default, not a profile this script made")
    return profile


def extend(default: dict[str, object]) -> dict[str, object]:
    """The engine's default with the sandbox's rule appended (pure: `default` is not
    changed). The rule names only the calls the default does not allow to all."""
    profile = check(json.loads(json.dumps(default)))
    missing = [name for name in SANDBOX_CALLS if name not in _allowed_to_all(profile)]
    if missing:
        profile["syscalls"].append({  # type: ignore[attr-defined]
            "names": missing,
            "action": "SCMP_ACT_ALLOW",
            "comment": f"{MARK}: the calls that build the sandbox's namespaces, "
                       "whatever the capabilities: "
                       + "; ".join(f"{n}: {SANDBOX_CALLS[n]}" for n in missing),
        })
    return profile


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        sys.stderr.write(__doc__ or "")
        return 0 if argv and argv[0] in ("-h", "--help") else 64
    source = argv[0]
    try:
        if source == "-":
            text = sys.stdin.read()
        else:
            with open(source, encoding="utf-8") as handle:
                text = handle.read()
        profile = extend(json.loads(text))
    except OSError as error:
        sys.stderr.write(f"make_profile: cannot read {source}: {error.strerror}\n")
        return 66
    except ValueError as error:  # json.JSONDecodeError and ProfileError
        sys.stderr.write(f"make_profile: {source}: {error}\n")
        return 65
    sys.stdout.write(json.dumps(profile, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
