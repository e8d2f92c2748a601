"""Egress by name: which names and ports the agent may reach, judged for one connection.

Pure. `parse_rule` reads one `allow-domain` value: `NAME[:PORT]`, where NAME is an
exact host name or `*.suffix` (any name below the suffix, never the suffix itself),
or `@PRESET`. Without a port a rule allows 80 and 443; with one, exactly that port.
`judge` answers for a name and a port, with the rule that allowed it, or why not and
the line that would allow it.
"""

from __future__ import annotations

from claude_sandbox.core.record import record

WEB_PORTS = (80, 443)

# The named lists an operator writes as `allow-domain = @NAME`. The agents' own API
# and login hosts; the package registries; the forges (with ssh for git).
PRESETS: dict[str, tuple[str, ...]] = {
    "claude": ("api.anthropic.com", "console.anthropic.com", "statsig.anthropic.com",
               "claude.ai", "platform.claude.com"),
    "codex": ("api.openai.com", "auth.openai.com", "chatgpt.com"),
    "pi": ("api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"),
    "npm": ("registry.npmjs.org", "registry.yarnpkg.com"),
    "pypi": ("pypi.org", "files.pythonhosted.org"),
    "debian": ("deb.debian.org", "security.debian.org", "archive.ubuntu.com",
               "security.ubuntu.com", "ports.ubuntu.com"),
    "crates": ("crates.io", "index.crates.io", "static.crates.io", "static.rust-lang.org"),
    "go": ("proxy.golang.org", "sum.golang.org"),
    "github": ("github.com", "github.com:22", "api.github.com", "codeload.github.com",
               "uploads.github.com", "*.githubusercontent.com"),
    "gitlab": ("gitlab.com", "gitlab.com:22", "registry.gitlab.com"),
}
REGISTRIES = ("npm", "pypi", "debian", "crates", "go")
FORGES = ("github", "gitlab")


class RuleError(ValueError):
    """An allow-domain value that does not parse; the message says why."""


@record
class Rule:
    pattern: str  # an exact name, or "*.suffix"
    ports: tuple[int, ...]
    origin: str  # "" for the operator's own line, else the preset's name

    def shown(self) -> str:
        port = "" if self.ports == WEB_PORTS else f":{self.ports[0]}"
        return f"{self.pattern}{port}" + (f" (@{self.origin})" if self.origin else "")


@record
class Verdict:
    allowed: bool
    rule: str  # the rule that allowed it, or why it was refused
    fix: str  # the configuration line that would allow it ("" when allowed)


_NAME = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")


def _name(text: str) -> str:
    name = text.lower().rstrip(".")
    labels = name.split(".")
    if not name or len(name) > 253 or not set(name) <= _NAME or any(
            not label or len(label) > 63 or label.startswith("-") or label.endswith("-")
            for label in labels):
        raise RuleError(f"{text!r} is not a host name")
    if labels[-1].isdigit():
        raise RuleError(f"{text!r} is an address: allow-ip names addresses")
    return name


def parse_rule(text: str, origin: str = "") -> tuple[Rule, ...]:
    """The rules of one allow-domain value (a preset gives several)."""
    text = text.strip()
    if text.startswith("@"):
        preset = PRESETS.get(text[1:])
        if preset is None:
            raise RuleError(f"{text!r} is not a preset; the presets: "
                            + ", ".join(f"@{name}" for name in PRESETS))
        return tuple(rule for item in preset for rule in parse_rule(item, text[1:]))
    name, colon, port = text.rpartition(":") if ":" in text else (text, "", "")
    ports: tuple[int, ...] = WEB_PORTS
    if colon:
        if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
            raise RuleError(f"{port!r} is not a port 1-65535")
        ports = (int(port),)
    if name.startswith("*."):
        return (Rule("*." + _name(name[2:]), ports, origin),)
    if "*" in name:
        raise RuleError(f"{name!r}: a wildcard is only `*.suffix`")
    return (Rule(_name(name), ports, origin),)


def defaults(agent: str) -> tuple[Rule, ...]:
    """The default allow-list: the agent's own hosts, the registries and the forges."""
    own = (agent,) if agent in PRESETS else ()
    return tuple(rule for preset in (*own, *REGISTRIES, *FORGES)
                 for rule in parse_rule(f"@{preset}"))


def matches(pattern: str, name: str) -> bool:
    if pattern.startswith("*."):
        return name.endswith(pattern[1:]) and len(name) > len(pattern) - 1
    return name == pattern


def judge(rules: tuple[Rule, ...], name: str | None, port: int) -> Verdict:
    """May a connection to `name`:`port` go out? `name` None: no name to judge by."""
    if name is None:
        return Verdict(False, "no name to judge by (no TLS server name, no HTTP Host, "
                       "no name this session's DNS answered for the address)",
                       "allow-ip = ADDRESS, for an address the agent must reach by number")
    for rule in rules:
        if port in rule.ports and matches(rule.pattern, name):
            return Verdict(True, rule.shown(), "")
    fix = f"allow-domain = {name}" + ("" if port in WEB_PORTS else f":{port}")
    return Verdict(False, f"{name}:{port} is not on the allow-list", fix)


MODES = ("allow-list", "open", "learn")


@record
class Policy:
    """What the egress proxy enforces for one launch (keys egress-policy, allow-domain)."""

    mode: str  # allow-list | open | learn
    agent: str
    rules: tuple[Rule, ...]
    allow_ip: tuple[str, ...] = ()  # addresses the operator allowed by number
    host: tuple[str, ...] = ()  # the host's own addresses and gateways: never upstream
    hosts_file: str = "/etc/hosts"  # the container's names, read first (its resolver's order)
    upstream: str = ""  # the proxy the network requires (upstreamproxy.Upstream.encode)

    def open(self) -> bool:
        return self.mode != "allow-list"

    def names_allowed(self, name: str) -> bool:
        """May DNS answer `name` (on any port)? Under the allow-list only a host name: a
        label holding a dot or other bytes would be asked upstream as another name."""
        if self.open():
            return True
        try:
            _name(name)
        except RuleError:
            return False
        return any(matches(rule.pattern, name) for rule in self.rules)

    def fields(self) -> list[str]:
        """As frame fields (holder.encode_frame) for the proxy's control socket: no JSON
        on the launch path."""
        rules = [part for r in self.rules
                 for part in (r.pattern, ",".join(map(str, r.ports)), r.origin)]
        return [self.mode, self.agent, str(len(self.rules)), *rules,
                ",".join(self.allow_ip), ",".join(self.host), self.hosts_file, self.upstream]

    @classmethod
    def from_fields(cls, fields: list[str]) -> Policy:
        """The inverse of fields(); ValueError for anything else."""
        mode, agent, count = fields[0], fields[1], int(fields[2])
        if mode not in MODES or len(fields) != size(count):
            raise ValueError("not a policy")
        rows = fields[3:3 + 3 * count]
        rules = tuple(Rule(rows[i], tuple(int(p) for p in rows[i + 1].split(",")), rows[i + 2])
                      for i in range(0, len(rows), 3))
        allow_ip, host, hosts_file, upstream = fields[-4:]
        return cls(mode, agent, rules, tuple(filter(None, allow_ip.split(","))),
                   tuple(filter(None, host.split(","))), hosts_file, upstream)


def size(count: int) -> int:
    """How many frame fields a policy of `count` rules takes (what follows is the
    broker's)."""
    return 7 + 3 * count


def rules_for(agent: str, lines: tuple[str, ...]) -> tuple[Rule, ...]:
    """The allow-list of a launch from the operator's allow-domain values (already
    checked by the configuration): without any `@PRESET` line, the defaults and the
    listed names; with one, only the presets and names listed."""
    chosen = tuple(rule for text in lines for rule in parse_rule(text))
    if any(text.strip().startswith("@") for text in lines):
        return tuple(dict.fromkeys(chosen))
    return tuple(dict.fromkeys(defaults(agent) + chosen))
