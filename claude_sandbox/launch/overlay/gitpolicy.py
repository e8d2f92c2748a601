"""Which .git/config variables may go from the agent's copy to the real file: the allow-list.

repoconfig.py reads and writes git's config syntax; this module judges each
variable. Deny by default: what the allow-list does not name stays behind, and
what git runs, follows or trusts gets a reason of its own, so the user sees why
(ADR 0010).
"""

from __future__ import annotations

from claude_sandbox.launch.overlay.repoconfig import Change, Entry, parse, rewrite, variable_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


# The policy. Deny by default: what _ALLOWED does not name is refused. What git
# runs, follows or trusts gets a reason of its own, so that the user sees why.
_RUN = "runs a program"
_DANGER: dict[str, str] = {  # "section.key" (any subsection) or a whole "section"
    "core.fsmonitor": _RUN, "core.sshcommand": _RUN, "core.pager": _RUN, "core.editor": _RUN,
    "core.askpass": _RUN, "core.gitproxy": _RUN, "sequence.editor": _RUN, "pager": _RUN,
    "core.hookspath": "chooses the hooks git runs",
    # Drivers: textconv and external diffs, merge drivers; clean, smudge and process filters.
    "diff.textconv": _RUN, "diff.command": _RUN, "diff.external": _RUN, "merge.driver": _RUN,
    "filter": "runs programs on checkout and add",
    # A local fetch or push runs these; vcs names a remote helper; update can be !command.
    "remote.uploadpack": _RUN, "remote.receivepack": _RUN, "remote.vcs": _RUN,
    "submodule.update": "runs a command (!command)",
    "uploadpack": "runs programs (packObjectsHook)", "receivepack": "runs hooks and programs",
    "alias": "runs commands, shell commands with !", "gpg": "runs a signing program",
    "credential": "runs helpers that receive passwords",
    # Another file's variables, past this filter (and /dev/tty would hang git).
    "include": "reads another config file", "includeif": "reads another config file",
    # Every URL git fetches or pushes, whichever remote names it.
    "url": "rewrites the URLs git uses",
    # Proxies, certificates, cookie files and extra headers: where secrets go.
    "http": "sets proxies, certificates and headers",
    # protocol.ext.allow would let an ext:: URL run its command.
    "protocol": "allows transports that run commands",
}
_ALLOWED: dict[tuple[str, bool], tuple[str, ...]] = {  # (section, has a subsection): keys
    ("remote", True): ("url", "pushurl", "fetch", "push", "tagopt", "prune", "prunetags",
                       "mirror", "skipdefaultupdate", "skipfetchall"),
    ("branch", True): ("remote", "pushremote", "merge", "rebase", "description"),
    ("user", False): ("name", "email"),
    ("submodule", True): ("url", "active", "branch", "shallow", "fetchrecursesubmodules",
                          "ignore"),
    # What git init, clone and worktree write, each with a plain value only.
    ("core", False): ("repositoryformatversion", "filemode", "bare", "logallrefupdates",
                      "ignorecase", "precomposeunicode", "symlinks", "worktree"),
    ("extensions", False): ("objectformat", "worktreeconfig"),
}
_BOOLEANS = frozenset({"", "true", "false", "yes", "no", "on", "off"})
# git fetches from and pushes to a local path (a/b, /a, ./a, ~/a, file://a) by running
# upload-pack or receive-pack on that repository itself, as the user, with its hooks:
# a bare repository the agent made in its store, named as a push URL, would run its
# pre-receive hook at the user's next push. `transport::address` runs a helper. So a
# URL may only name a network host.
_URL_KEYS = frozenset({("remote", "url"), ("remote", "pushurl"), ("submodule", "url")})
_SCHEMES = ("https://", "http://", "ssh://", "git://", "git+ssh://", "ssh+git://")
_NETWORK = "https://, http://, ssh://, git:// or host:path"
# branch.*.remote and pushremote name a remote, or are a URL themselves (`.` is the
# repository itself): a name no remote defines with a url is, to git, a local path.
_UPSTREAM_KEYS = ("remote", "pushremote")
# The user types a remote's name too (`git push origin HEAD:x`), whether or not a branch
# names it: once its url is gone, git reads `origin` as ./origin, which the agent may
# have made a repository with a pre-receive hook. So a url or pushurl the repository had
# at launch may change to another network URL, never go.
_REMOVED = ("it removes a remote's {key} the repository had at launch: git would then read "
            "the remote's name as a local path and run that repository's hooks")


def _name_refusal(section: str, subsection: str | None, key: str) -> str | None:
    # A subsection is the agent's text, maybe terminal escapes: a reason never shows it.
    shown = variable_name(section, None if subsection is None else "*", key)
    if f"{section}.{key}" in _DANGER:
        return f"{shown} {_DANGER[section + '.' + key]}"
    if section in _DANGER:
        return f"{section}.* {_DANGER[section]}"
    if key not in _ALLOWED.get((section, subsection is not None), ()):
        return f"{shown} is not on the allow-list"
    return None


def _plain(key: str, value: str | None) -> bool:
    if key == "objectformat":
        return value in ("sha1", "sha256")
    if value is None or value.lower() in _BOOLEANS:
        return True
    if key == "logallrefupdates" and value == "always":
        return True
    return key != "worktreeconfig" and value.isascii() and value.isdigit() and len(value) < 10


def network_url(url: str) -> bool:
    """Whether git reads `url` as a network host's: one of _SCHEMES, or scp-like
    `[user@]host:path`, which git tells from a local path by a ':' before any '/'."""
    scheme = next((s for s in _SCHEMES if url.startswith(s)), None)
    if scheme is not None:
        authority = url[len(scheme):].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
        host = authority.rpartition("@")[2]
        return _host(host if host.startswith("[") else host.partition(":")[0])
    head, colon, path = url.partition(":")
    # `name::address` runs git-remote-name; `name://` is a scheme not listed (file://).
    if not colon or "/" in head or path.startswith((":", "//")):
        return False
    return _host(head.rpartition("@")[2])


def _host(host: str) -> bool:
    # ssh would read a host that starts with '-' as an option (-oProxyCommand=...); one
    # that starts with '~' reads as a home directory's path wherever a ':' is not seen.
    return bool(host) and not host.startswith(("-", "~")) and host.isprintable() and not any(
        c.isspace() for c in host)


def _url_refusal(shown: str, value: str | None) -> str | None:
    url = (value or "").lstrip()
    if not url:
        return f"{shown} needs a value"
    if url.lower().startswith(("ext::", "fd::")):
        return f"{shown}: ext:: and fd:: URLs run a command or use open descriptors"
    if url.startswith("-"):
        return f"{shown} starts with '-', which ssh or git would read as an option"
    if not url.isprintable():  # a newline once leaked credentials to another host
        return f"{shown} holds control characters"
    if not network_url(value or ""):
        return (f"{shown} must be a network URL ({_NETWORK}): to a local path, file:// or "
                "a transport:: form git runs that repository's hooks or a helper")
    return None


def refusal(entry: Entry) -> str | None:
    """None when `entry` may go from the agent's config to the real one, else why not."""
    section, key, value = entry.section, entry.key, entry.value
    reason = _name_refusal(section, entry.subsection, key)
    if reason is not None:
        return reason
    shown = variable_name(section, None if entry.subsection is None else "*", key)
    if "claude-sandbox/" in f"{value or ''} {entry.subsection or ''}".lower():
        # An upstream or refspec there would take up what the exit keeps aside unread
        # (refs/claude-sandbox/, gitcontrol.py): `git pull` would merge a held branch.
        return f"{shown} names the values the session's end keeps aside (refs/claude-sandbox/)"
    if section == "extensions" and key in ("objectformat", "compatobjectformat"):
        return f"{shown} is set when a repository is made, never after: git outside would " \
               "read every object and the index as another format"
    if (section, key) in _URL_KEYS:
        return _url_refusal(shown, value)
    if section == "branch" and key in _UPSTREAM_KEYS:
        if not value:
            return f"{shown} needs a value"
        if not value.isprintable():
            return f"{shown} holds control characters"
        # A name is judged with the whole config, in split().
    elif key == "worktree":
        # The shape only: the caller resolves the path and keeps it in the workspace.
        if not value or value.startswith(("/", "~")) or "\n" in value or "\0" in value:
            return "core.worktree must be a relative path"
    elif section in ("core", "extensions") and not _plain(key, value):
        return f"{shown} takes only a plain value (an integer, a boolean, sha1 or sha256)"
    return None


def split(found: Sequence[Change], current: str = ""
          ) -> tuple[tuple[Change, ...], tuple[tuple[Change, str], ...]]:
    """(the changes that may be applied, the refused ones with why), to be applied to
    the config text `current` (ConfigSyntax when it does not parse)."""
    applicable: list[Change] = []
    refused: list[tuple[Change, str]] = []
    for change in found:
        # A removal needs only the name: the user's own config keeps what it may not gain.
        reasons = [refusal(Entry(change.section, change.subsection, change.key, value, 0, 0))
                   for value in change.new] or [
                       _name_refusal(change.section, change.subsection, change.key)]
        reason = next((reason for reason in reasons if reason is not None), None)
        reason = _removal_refusal(change) or reason
        if reason is None:
            applicable.append(change)
        else:
            refused.append((change, reason))
    unbound = _unbound(current, applicable)
    return tuple(c for c in applicable if c not in unbound), (*refused, *unbound.items())


def _removal_refusal(change: Change) -> str | None:
    """Why a change that removes or empties a remote's url or pushurl set at launch (in
    `change.old`) may not be applied; None for any other change."""
    if change.section != "remote" or change.key not in ("url", "pushurl"):
        return None
    if any(change.old) and not any(change.new):
        return _REMOVED.format(key=change.key)
    return None


def _remotes(entries: Sequence[Entry]) -> set[str | None]:
    return {e.subsection for e in entries if (e.section, e.key) == ("remote", "url") and e.value}


def _unbound(current: str, applicable: Sequence[Change]) -> dict[Change, str]:
    """The changes that would leave a branch's remote or pushremote naming no remote,
    which git would then read as a local path (`evil`: the repository ./evil). A url
    set at launch cannot go (_removal_refusal): only the upstreams are judged here."""
    remotes = _remotes(parse(rewrite(current, applicable)))
    found: dict[Change, str] = {}
    for change in applicable:
        if change.section == "branch" and change.key in _UPSTREAM_KEYS and not all(
                v == "." or v in remotes or network_url(v or "") for v in change.new):
            found[change] = (f"branch.*.{change.key} names no remote with a url: git would "
                             "read the name as a local path and run that repository's hooks")
    return found
