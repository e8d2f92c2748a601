"""One way from the configuration to the plan, for a launch and for `explain` alike.

The configuration and the caps (`configure`), then the facts, the credential broker's
part and the plan (`decide`): a launch runs them with the jail's start between the two,
`explain` one after the other, and both get the same plan (its digest is the one a
launch with CLAUDE_SANDBOX_TRACE=1 prints). `explain` makes nothing: `make=False`.
"""

from __future__ import annotations

import sys

from claude_sandbox.launch.configure import config
from claude_sandbox.launch.configure.request import Request
from claude_sandbox.launch.configured import Configured, configure
from claude_sandbox.launch.facts import gather
from claude_sandbox.launch.planner import plan
from claude_sandbox.launch.session import notices

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["Configured", "broker_fields", "configure", "decide"]


def decide(configured: Configured, request: Request, environ: Mapping[str, str],
           keep_ignored: tuple[str, ...], store: str, *, make: bool = True,
           ) -> tuple[gather.Gathered, list[str], plan.Plan]:
    """The facts, the broker's fields for the egress proxy (real values: its control
    socket only) and the plan. `make`: a launch says what it holds back and makes the
    broker's certificate; `explain` does neither."""
    profile, cfg = configured.profile, configured.cfg
    gathered = gather.gather(profile, cfg, request, environ, keep_ignored, store)
    if make:
        if request.command is None:
            notices.hidden_path(gathered.facts)
        notices.upstream(gathered.upstream[1])
    gathered, fields = broker_fields(gathered, cfg, store, make=make)
    return gathered, fields, plan.make(profile, cfg, gathered, configured.limit_plan)


def broker_fields(gathered: gather.Gathered, cfg: config.Config, store: str, *,
                  make: bool = True) -> tuple[gather.Gathered, list[str]]:
    """The credential broker's certificate and the proxy's fields (real values in them:
    they go to the proxy's control socket only). Where the broker cannot work, the
    credential is not provided, said in one line: never its real value instead. `make`:
    False for `explain`, which makes nothing: the certificate already made is used, or
    the bundle shown without it until the launch makes one."""
    from claude_sandbox.core.record import replace

    brokered = gathered.credentials
    for line in brokered.unusable:
        sys.stderr.write(f"claude-sandbox: {line}\n")
    if not brokered.secrets:
        return gathered, []
    why = None
    bundle = None
    if not cfg.egress_jail:
        why = "the egress jail is off (egress-jail = 0), and with it the broker"
    else:
        from claude_sandbox.launch.facts import credentials
        from claude_sandbox.launch.session import tlsca

        bundle = tlsca.system_bundle()
        if bundle is None:
            why = (f"no system trust bundle to add the broker's CA to (none of "
                   f"{', '.join(credentials.SYSTEM_BUNDLES)}; apt-get install ca-certificates)")
        else:
            try:
                leaf = (tlsca.ensure if make else tlsca.preview)(store, brokered.hosts())
                with open(bundle, encoding="utf-8", errors="replace") as handle:
                    text = handle.read().rstrip("\n") + "\n" + leaf.ca
            except (tlsca.CertificateError, OSError) as exc:
                why = f"the broker's certificate cannot be made: {exc}"
    if why is not None or bundle is None:
        names = ", ".join(c.variable for c in brokered.credentials)
        sys.stderr.write(f"claude-sandbox: credentials not provided ({names}): {why}\n")
        held = {name for name, _ in brokered.env}
        return replace(gathered, environ=tuple(p for p in gathered.environ if p[0] not in held),
                       credentials=replace(brokered, env=(), secrets=())), []
    fields = [leaf.chain, leaf.key, bundle, str(len(brokered.secrets))]
    for secret in brokered.secrets:
        fields += [secret.sentinel, secret.real, ",".join(secret.hosts)]
    return replace(gathered, trust=(bundle, text)), fields
