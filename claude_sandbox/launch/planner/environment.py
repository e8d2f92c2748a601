"""The sandbox's whole environment, as pure functions: an allow-list, never the caller's copy.

What passes from the launching environment: the terminal and the locale
(PASSED_THROUGH and the locale's own LC_ categories, keys.LOCALE), the connection
settings that hold no secret (CONNECTION; PROXIES with the jail off), and what the
operator names with pass-env. Everything else stays out, whatever its name
(checks 04, 05, 37).
"""

from __future__ import annotations

import os

from claude_sandbox.core import paths
from claude_sandbox.launch.configure import keys
from claude_sandbox.launch.configure.config import Config
from claude_sandbox.launch.configure.profiles import Profile
from claude_sandbox.launch.facts.hostfacts import HostFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

AGENT_SHELL = "/bin/bash"
# Passed through from the launching environment when set: terminal and locale.
PASSED_THROUGH = (
    "TERM", "COLORTERM", "LANG", "LANGUAGE", "TZ", "NO_COLOR", "FORCE_COLOR",
    "COLUMNS", "LINES", "EDITOR", "VISUAL",
)  # fmt: skip
# Connection settings: where tools find the trusted CAs, and which provider, region and
# model an agent routes to. None holds a secret (the keys and tokens that go with them
# stay out, and are named at launch: profiles.Profile.credentials); without them uv fails
# on a corporate CA and claude on a gateway says only "Not logged in".
CONNECTION = (
    "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH", "PIP_CERT", "UV_NATIVE_TLS",
    "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX",
    "ANTHROPIC_VERTEX_PROJECT_ID", "CLOUD_ML_REGION", "AWS_REGION", "AWS_DEFAULT_REGION",
    "OPENAI_BASE_URL",
)  # fmt: skip
# Of those, the URLs: one with a user part or a query may carry a key in it
# (https://user:key@gateway/, ?key=...), and stays out unless pass-env names it.
URL_SETTINGS = ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL")
# Proxy settings: with the egress jail the agent's traffic goes to the egress proxy
# whatever the tool asks, and a tool that also asked a proxy address would be judged by
# the wrong name; they pass only with the jail off. With the jail on, the egress proxy
# itself goes through the proxy they name (jail/upstreamproxy.py).
PROXIES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY",
           "https_proxy", "http_proxy", "all_proxy", "no_proxy")


# The installer's install hints (install/hints.py), first on PATH inside: one line before
# an install that would write outside the workspace, then the real program.
HINTS_DIR = f"{paths.LIBEXEC}/hints"


def inner_path(facts: HostFacts) -> str:
    """PATH inside: the install hints, then the caller's, with ~/.local/bin last, after
    system directories."""
    local_bin = os.path.join(facts.home, ".local/bin")
    entries = [entry for entry in facts.path if entry not in (local_bin, HINTS_DIR)] \
        or list(paths.SYSTEM_DIRS)
    return ":".join([HINTS_DIR, *entries, local_bin])


def secret_in_url(value: str) -> bool:
    """Whether a URL setting's value may carry a key: a user part, a query or a fragment."""
    host = value.partition("://")[2].split("/", 1)[0]
    return "@" in host or "?" in value or "#" in value


def passed_names(config: Config, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The launching variables the environment below may take: terminal, locale,
    connection settings (proxies only with the jail off; a URL only without a key in
    it), pass-env."""
    return tuple(name for name in environ if name in PASSED_THROUGH
                 or name in keys.LOCALE or name in config.pass_env
                 or (name in CONNECTION and not (name in URL_SETTINGS
                                                 and secret_in_url(environ[name])))
                 or (name in PROXIES and not config.egress_jail))


def environment(
    profile: Profile,
    config: Config,
    facts: HostFacts,
    environ: Mapping[str, str],
) -> tuple[tuple[str, str], ...]:
    """The sandbox's whole environment: an allow-list, never the caller's copy."""
    env: dict[str, str] = {
        "HOME": facts.home,
        "USER": facts.user,
        "LOGNAME": facts.user,
        "PATH": inner_path(facts),
        "SHELL": AGENT_SHELL,
        "IS_SANDBOX": "1",
        "IS_SANDBOX_AGENT": profile.name,
        "GIT_CONFIG_GLOBAL": paths.GITCONFIG_INSIDE,
        "GIT_CONFIG_SYSTEM": "/dev/null",
        # The sandbox's mounts are boundaries git would stop at: a launch from a
        # subdirectory has its repository's top on another mount (check 70).
        "GIT_DISCOVERY_ACROSS_FILESYSTEM": "1",
    }
    env.update(profile.env)
    if profile.tmp_variable and facts.agent_tmp:
        env[profile.tmp_variable] = facts.agent_tmp
    # Last: pass-env may override a profile's variable; terminal and locale names
    # (PASSED_THROUGH, LC_*) collide with none of the above.
    env.update((name, environ[name]) for name in passed_names(config, environ))
    return tuple(sorted(env.items()))
