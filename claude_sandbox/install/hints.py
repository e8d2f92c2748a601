"""One line, once a session, before an install that would write outside the workspace.

Outside the workspace the sandbox is read-only, and package managers then fail in their
own words, none of which says why: apt-get asks "are you root?" (as root), npm reports a
directory that does not exist, pip an OSError, cargo a file it cannot replace. So the
installer places a small script under each package manager's name in HINTS_DIR, which
the sandbox's PATH puts first (environment.inner_path), for each name found on the
system when the installer runs: a name with no program would make `command -v` say it is
there (a script choosing pnpm over npm would then fail). The script finds the real
program (the next of that name on PATH), and when the arguments ask for an install into
a system or toolchain place, it says once a session (a marker in the session's private
/tmp) what to do instead; then it execs the real program with the same arguments,
whatever they were. Outside the sandbox nothing puts HINTS_DIR on PATH.

A hint, not a defence: the read-only mounts are what refuse the write, and a program
reached another way (`python3 -m pip`, a full path) fails as it did, with no line.
"""

from __future__ import annotations

from claude_sandbox.launch.planner.environment import HINTS_DIR

__all__ = ["HINTS_DIR", "MARKER", "NAMES", "SCRIPT", "wanted"]
MARKER = "/tmp/.claude-sandbox-install-hint"
# The names a script is placed under; the script's `case` below decides, for each, which
# arguments write outside the workspace.
NAMES = ("apt", "apt-get", "aptitude", "apk", "dnf", "yum", "microdnf", "zypper", "dpkg",
         "rpm", "pacman", "npm", "pnpm", "bun", "yarn", "pip", "pip3", "gem", "cargo")

SCRIPT = r"""#!/bin/sh
# claude-sandbox: a hint before an install that would write outside the workspace (it is
# read-only in the sandbox), then the real program with the same arguments. Placed by
# the installer under each package manager's name; the sandbox's PATH lists this
# directory first. Do not edit.
name=${0##*/}
real=
set -f
saved_ifs=$IFS
IFS=:
for dir in $PATH; do
    # Not this script again, however PATH spells its directory (a trailing slash, a
    # link, `.`): the same file by device and inode.
    if [ -n "$dir" ] && [ -f "$dir/$name" ] && [ -x "$dir/$name" ] \
            && ! [ "$dir/$name" -ef "$0" ]; then
        real=$dir/$name
        break
    fi
done
IFS=$saved_ifs
set +f
if [ -z "$real" ]; then
    echo "$name: command not found" >&2
    exit 127
fi
outside=
local_target=
for arg; do
    case $name:$arg in
    apt:install|apt:reinstall|apt:remove|apt:purge|apt:upgrade|apt:full-upgrade|\
    apt:dist-upgrade|apt:autoremove|apt:build-dep|apt:update|\
    apt-get:install|apt-get:reinstall|apt-get:remove|apt-get:purge|apt-get:upgrade|\
    apt-get:dist-upgrade|apt-get:autoremove|apt-get:build-dep|apt-get:update|\
    aptitude:install|aptitude:reinstall|aptitude:remove|aptitude:purge|\
    aptitude:upgrade|aptitude:safe-upgrade|aptitude:full-upgrade|aptitude:update|\
    apk:add|apk:del|apk:upgrade|apk:update|apk:fix|\
    dnf:install|dnf:reinstall|dnf:remove|dnf:erase|dnf:upgrade|dnf:update|dnf:downgrade|\
    yum:install|yum:reinstall|yum:remove|yum:erase|yum:upgrade|yum:update|yum:downgrade|\
    microdnf:install|microdnf:reinstall|microdnf:remove|microdnf:upgrade|microdnf:update|\
    zypper:install|zypper:in|zypper:remove|zypper:rm|zypper:update|zypper:up|\
    zypper:dist-upgrade|zypper:dup|\
    dpkg:-i|dpkg:--install|dpkg:-r|dpkg:--remove|dpkg:-P|dpkg:--purge|dpkg:--unpack|\
    dpkg:--configure|\
    rpm:-i*|rpm:-U*|rpm:-F*|rpm:-e|rpm:--install|rpm:--upgrade|rpm:--freshen|rpm:--erase|\
    pacman:-S|pacman:-Sy*|pacman:-Su*|pacman:-R*|pacman:-U*|pacman:--sync|pacman:--remove|\
    pacman:--upgrade|\
    npm:-g|npm:--global|npm:--location=global|pnpm:-g|pnpm:--global|bun:-g|bun:--global|\
    yarn:global|pip:install|pip:uninstall|pip3:install|pip3:uninstall|\
    gem:install|gem:uninstall|gem:update|cargo:install|cargo:uninstall)
        outside=1 ;;
    # pip into a chosen place, gem into the user's, cargo into another root: nothing
    # outside the workspace is asked for (or it is the user's own choice of place).
    pip:--user|pip:--target*|pip:-t|pip:--prefix*|pip:--root*|\
    pip3:--user|pip3:--target*|pip3:-t|pip3:--prefix*|pip3:--root*|\
    gem:--user-install|gem:-i|gem:--install-dir*|cargo:--root*)
        local_target=1 ;;
    esac
done
case $name in
pip|pip3) [ -n "${VIRTUAL_ENV:-}${CONDA_PREFIX:-}" ] && local_target=1 ;;
gem) [ -n "${GEM_HOME:-}" ] && local_target=1 ;;
esac
if [ -n "$outside" ] && [ -z "$local_target" ] && [ ! -e __MARKER__ ]; then
    # In a subshell: a redirection that fails ends a POSIX shell's special built-in, and
    # with it the script, where /tmp cannot be written (a nested sandbox).
    (: > __MARKER__) 2>/dev/null
    echo "claude-sandbox: outside the workspace is read-only in this sandbox, so \`$name\`" \
        "cannot install there. Install it outside the sandbox (in the container's own" \
        "shell), or into the workspace (a virtual environment, a project's own" \
        "dependencies); root can name a writable path with allow-write in" \
        "/etc/claude-sandbox.conf." >&2
fi
exec "$real" "$@"
""".replace("__MARKER__", MARKER)


def wanted() -> dict[str, str]:
    """The text of each script HINTS_DIR holds, by file name."""
    return dict.fromkeys(NAMES, SCRIPT)
