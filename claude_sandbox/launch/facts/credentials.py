"""Credentials the agent never holds: a sentinel inside, the real value added at the proxy.

A credential is a variable (GH_TOKEN) or a forge CLI's stored token (gh's hosts.yml,
glab's config.yml) with the hosts it belongs to. Inside, the agent sees a per-session
sentinel of the same shape in its place; the egress proxy, outside the agent's reach,
terminates TLS for those hosts only and puts the real value back into the request's
credential headers (jail/egressinject.py, docs/explanation/credentials.md). Sent
anywhere else, the sentinel is a meaningless string.

A variable is brokered when a `credential` line declares it (and it is set); a forge
token whenever the forge configuration is bound, since the sandbox decides what those
files show. Everything here is pure but `sentinel`, which draws from
the system's random source, and `read_forge`, which reads the forge files.
"""

from __future__ import annotations

import os
import stat

from claude_sandbox.core.errors import EXIT_CONFIG, SandboxError
from claude_sandbox.core.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

GITHUB = ("github.com", "api.github.com")
# The built-in table: a `credential = VAR` line names one of these with its hosts, and
# `credential = VAR HOST[,HOST...]` sets or overrides the hosts.
DEFAULTS: dict[str, tuple[str, ...]] = {
    "GH_TOKEN": GITHUB,
    "GITHUB_TOKEN": GITHUB,
    "GITLAB_TOKEN": ("gitlab.com",),
    "ANTHROPIC_API_KEY": ("api.anthropic.com",),
    "OPENAI_API_KEY": ("api.openai.com",),
}
# The forge files whose tokens are brokered, relative to the home, and each forge's
# variable in the table (its hosts, for the forge's default host).
FORGE_FILES = ((".config/gh/hosts.yml", "oauth_token", "GH_TOKEN"),
               (".config/glab-cli/config.yml", "token", "GITLAB_TOKEN"))
# Literals, not the string module: the launch imports as little as it can.
_DIGITS = "0123456789"
_LOWER = "abcdefghijklmnopqrstuvwxyz"
_UPPER = _LOWER.upper()
_NAME_CHARS = frozenset(_LOWER + _UPPER + _DIGITS + "_")
_HOST_CHARS = frozenset(_LOWER + _DIGITS + "-.")
# Characters a real value may hold: it goes into an HTTP header as it is.
_TOKEN_CHARS = frozenset(_LOWER + _UPPER + _DIGITS + "-._~+/=:")
# Where the system's trust bundle is, by distribution: the sandbox binds it, with the
# broker's CA added, over the first that exists.
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                  "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem")
# The variables tools read for extra or replacement trust, all set to the bound bundle.
TRUST_VARIABLES = ("NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
                   "CURL_CA_BUNDLE", "GIT_SSL_CAINFO")


@record
class Credential:
    """One brokered credential, as the plan holds it: never its value."""

    variable: str  # GH_TOKEN; for a forge file's token, the file and its host
    hosts: tuple[str, ...]  # where the proxy puts the real value back
    source: str  # where the real value was read: $GH_TOKEN, ~/.config/gh/hosts.yml
    sentinel: str  # what the agent sees in its place, for this session only


@record
class Secret:
    """A sentinel and its real value, for the proxy only (never in the plan)."""

    sentinel: str
    real: str
    hosts: tuple[str, ...]


def _host_name(text: str) -> bool:
    return (bool(text) and set(text) <= _HOST_CHARS and "." in text and ".." not in text
            and not text.startswith((".", "-")) and not text.endswith((".", "-"))
            and len(text) <= 253)


def parse_line(text: str, where: str) -> tuple[str, tuple[str, ...]]:
    """A `credential` value: `VAR` (a built-in's hosts) or `VAR HOST[,HOST...]`."""
    variable, _, rest = text.strip().partition(" ")
    if not variable or not set(variable) <= _NAME_CHARS or variable[0].isdigit():
        raise SandboxError(f"{where}: credential {variable!r} is not a variable name",
                           EXIT_CONFIG)
    rest = rest.strip()
    if not rest:
        if variable not in DEFAULTS:
            raise SandboxError(f"{where}: credential {variable} has no built-in hosts; "
                               f"name them: `credential = {variable} HOST[,HOST...]`",
                               EXIT_CONFIG)
        return variable, DEFAULTS[variable]
    hosts = tuple(h.strip().lower() for h in rest.replace(" ", ",").split(",") if h.strip())
    for host in hosts:
        if not _host_name(host):
            raise SandboxError(f"{where}: credential {variable}: {host!r} is not a host name",
                               EXIT_CONFIG)
    return variable, tuple(dict.fromkeys(hosts))


def table(lines: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The built-in table with the operator's `credential` lines over it (already
    checked by the configuration; a later line wins)."""
    found = dict(DEFAULTS)
    for text in lines:
        variable, hosts = parse_line(text, "credential")
        found[variable] = hosts
    return found


def wanted(lines: Iterable[str], environ: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """The variables brokered in this launch, with their hosts: declared by a
    `credential` line and set here. (pass-env still passes a real value: an operator's
    explicit choice, for a key whose API sits behind a gateway of another name.)"""
    lines = tuple(lines)
    hosts = table(lines)
    declared = {parse_line(text, "credential")[0] for text in lines}
    return {name: hosts[name] for name in hosts if environ.get(name) and name in declared}


def value_problem(value: str) -> str | None:
    """Why `value` cannot be brokered (it must go into a header as it is), or None."""
    if not value or not set(value) <= _TOKEN_CHARS or len(value) > 4096:
        return "its value is not a token (letters, digits and -._~+/=: only)"
    return None


def draw(alphabet: str, size: int) -> str:
    """`size` characters of `alphabet`, each equally likely, from the kernel's random
    source (what `secrets` uses, without the import of `random` on every launch). A byte
    at or above the largest multiple of the alphabet's length is dropped: taken modulo,
    it would favour the alphabet's first characters."""
    limit = 256 - 256 % len(alphabet)
    drawn: list[str] = []
    while len(drawn) < size:
        drawn.extend(alphabet[b % len(alphabet)] for b in os.urandom(2 * size) if b < limit)
    return "".join(drawn[:size])


def _hex(size: int) -> str:
    return draw("0123456789abcdef", size)


# The token kinds whose prefix a sentinel keeps, so that a tool checking the kind (gh
# wants ghp_ or gho_) still takes it; nothing else of the real value is kept.
PREFIXES = ("github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "glpat-", "sk-ant-api03-",
            "sk-ant-", "sk-proj-", "sk-")
_ALNUM = _LOWER + _UPPER + _DIGITS
_RANDOM_CHARS = 22  # 62**22 > 2**130: a sentinel is never guessed


def sentinel(value: str) -> str:
    """A stand-in for `value`: its kind's prefix (PREFIXES), then random letters and
    digits, as long as the value or at least _RANDOM_CHARS of them. Drawn each session."""
    prefix = next((p for p in PREFIXES if value.startswith(p)), "")
    size = max(len(value) - len(prefix), _RANDOM_CHARS)
    return prefix + draw(_ALNUM, size)


def forge_tokens(text: str, token_key: str) -> list[tuple[str, str]]:
    """(host, token) for each `TOKEN_KEY: value` line of a gh or glab YAML file: the host
    is the nearest key line above it, with no value, that names a host (gh: a top-level
    host; glab: a host under `hosts:`); keys without a dot (users, an account) leave it.
    A key that looks like a host but is none (`corp.example:8443`) gives "", so its
    tokens are never credited to the host above. A minimal reading: these files are
    flat maps of plain scalars."""
    found: list[tuple[str, str]] = []
    host = ""
    for line in text.splitlines():
        stripped = line.split(" #", 1)[0].strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith(":"):
            key = stripped[:-1].strip().strip("'\"").lower()
            if "." in key or ":" in key:
                host = key if _host_name(key) else ""
            continue
        key, sep, value = stripped.partition(":")
        value = value.strip().strip("'\"")
        if sep and key.strip().strip("'\"") == token_key and value:
            found.append((host, value))
    return found


def forge_hosts(host: str, variable: str, hosts: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """Where a forge token for `host` belongs: the table's hosts for the forge's own
    variable when `host` is among them, else the host alone."""
    default = hosts.get(variable, ())
    return default if host in default else (host,)


FORGE_DIRS = (".config/gh", ".config/glab-cli")
_FORGE_FILE_MAX = 1 << 20
_FORGE_FILES_MAX = 1000


def read_forge(home: str) -> dict[str, str | None]:
    """Every regular file of the forge directories under `home`, at any depth, by
    relative path: its text (bytes kept as they are), or None for one too large to scan,
    which is then shown empty. All of them, not only the files that name tokens: a token
    copied into another file there (a backup, a second account) is found by its value."""
    found: dict[str, str | None] = {}
    for top in FORGE_DIRS:
        for rel in _regular_files(home, top)[:_FORGE_FILES_MAX]:
            data = _read_regular(os.path.join(home, rel), _FORGE_FILE_MAX + 1)
            if data is None:
                continue  # unreadable here is unreadable inside (the same user), or gone
            found[rel] = (data.decode("utf-8", "surrogateescape")
                          if len(data) <= _FORGE_FILE_MAX else None)
    return found


def _read_regular(path: str, limit: int) -> bytes | None:
    """Up to `limit` bytes of `path` if it is a regular file when opened: a FIFO put in
    its place after the directory was read must not hold the launch (O_NONBLOCK), nor a
    link lead elsewhere (O_NOFOLLOW)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], limit
        while left and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _regular_files(home: str, rel: str) -> list[str]:
    found: list[str] = []
    pending = [rel]
    while pending and len(found) < _FORGE_FILES_MAX:
        here = pending.pop()
        try:
            entries = list(os.scandir(os.path.join(home, here)))
        except OSError:
            continue
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                found.append(os.path.join(here, entry.name))
            elif entry.is_dir(follow_symlinks=False):
                pending.append(os.path.join(here, entry.name))
    return sorted(found)


def replaced(text: str, pairs: Mapping[str, str]) -> str:
    """`text` with every real value in `pairs` replaced by its sentinel, in one pass (a
    sentinel put in is never scanned again), the longer value first where two overlap."""
    if not pairs:
        return text
    import re

    pattern = re.compile("|".join(map(re.escape, sorted(pairs, key=len, reverse=True))))
    return pattern.sub(lambda found: pairs[found.group(0)], text)


@record
class Brokered:
    """What a launch brokers: the plan's part (credentials, env, forge) and the proxy's
    (secrets), kept apart so that no plan, and no rendering of one, holds a real value."""

    credentials: tuple[Credential, ...] = ()
    secrets: tuple[Secret, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # VAR, its sentinel
    forge: tuple[tuple[str, str], ...] = ()  # a forge file (relative to home), its text inside
    unusable: tuple[str, ...] = ()  # one line each: a credential not provided, and why

    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(h for c in self.credentials for h in c.hosts))


def broker(lines: Iterable[str], environ: Mapping[str, str],
           forge_texts: Mapping[str, str | None]) -> Brokered:
    """Every credential of a launch: the variables `wanted` names and the forge files'
    tokens, one sentinel per real value (so gh and $GH_TOKEN agree inside)."""
    lines = tuple(lines)
    hosts = table(lines)
    sentinels: dict[str, str] = {}
    where_for: dict[str, tuple[str, ...]] = {}
    credentials: list[Credential] = []
    unusable: list[str] = []
    env: list[tuple[str, str]] = []

    def take(real: str, belongs: tuple[str, ...]) -> str:
        if real not in sentinels:
            made = sentinel(real)
            taken = [*sentinels, *sentinels.values()]
            while any(made in other or other in made for other in taken):
                made = sentinel(real)  # never one inside another: a replace would mix them
            sentinels[real] = made
            where_for[real] = ()
        where_for[real] = tuple(dict.fromkeys((*where_for[real], *belongs)))
        return sentinels[real]

    for name, its_hosts in wanted(lines, environ).items():
        problem = value_problem(environ[name])
        if problem:
            unusable.append(f"${name} is not provided: {problem}")
            continue
        made = take(environ[name], its_hosts)
        credentials.append(Credential(name, its_hosts, f"${name}", made))
        env.append((name, made))
    gone: dict[str, str] = {}  # real values that are not tokens: replaced, never put back
    for rel, token_key, variable in FORGE_FILES:
        for host, real in forge_tokens(forge_texts.get(rel) or "", token_key):
            if real in sentinels or real in gone:
                continue
            if not _host_name(host):
                gone[real] = _hex(32)
                unusable.append(f"a token in ~/{rel} is not provided: it is under no host "
                                "name")
                continue
            if value_problem(real):
                gone[real] = _hex(32)
                unusable.append(f"the token for {host or '?'} in ~/{rel} is not provided: "
                                f"{value_problem(real)}")
                continue
            its_hosts = forge_hosts(host, variable, hosts)
            credentials.append(Credential(f"{host or '?'} ({rel.split('/')[1]})", its_hosts,
                                          f"~/{rel}", take(real, its_hosts)))
    # Every forge file that holds any real value, wherever it came from, shows the
    # sentinel instead: found by value, not by the file's name.
    every = {**sentinels, **gone}
    forge = [(rel, "" if text is None else replaced(text, every))
             for rel, text in sorted(forge_texts.items())
             if text is None or any(real in text for real in every)]
    return Brokered(tuple(credentials),
                    tuple(Secret(sentinels[r], r, where_for[r]) for r in sentinels),
                    tuple(env), tuple(forge), tuple(unusable))
