"""The certificate the egress proxy shows for a credential's hosts, and the CA behind it.

For each set of credential hosts, a CA of its own and one leaf certificate naming
those hosts, made by the openssl tool (the standard library makes no certificates)
in the user's state store, 0700, outside every sandbox. The CA is name-constrained
to those hosts, and its private key is deleted once the leaf is signed: nothing can
sign again with it, and a leaked copy of the leaf's key could only ever speak for
the hosts it already names, and only to a client that trusts this CA, which is the
sandbox alone. Kept LEAF_DAYS and made again after REMAKE_DAYS, or at once when the
hosts change (they name the directory).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time

from claude_sandbox.core import paths
from claude_sandbox.core.record import record
from claude_sandbox.launch.facts.credentials import SYSTEM_BUNDLES

LEAF_DAYS = 90
REMAKE_DAYS = 60


@record
class Leaf:
    chain: str  # the leaf, then the CA: what the proxy presents
    key: str  # the leaf's private key (0600, in the store)
    ca: str  # the CA certificate's PEM text, for the bundle inside


class CertificateError(Exception):
    """The certificate could not be made; the message says why, in one line."""


def system_bundle() -> str | None:
    return next((path for path in SYSTEM_BUNDLES if os.path.isfile(path)), None)


def directory(store: str, hosts: tuple[str, ...]) -> str:
    key = hashlib.sha256(",".join(sorted(hosts)).encode()).hexdigest()[:16]
    return os.path.join(store, "tls", key)


def _fresh(where: str) -> bool:
    try:
        made = os.stat(os.path.join(where, "leaf.pem")).st_mtime
    except OSError:
        return False
    return time.time() - made < REMAKE_DAYS * 86400 and all(
        os.path.exists(os.path.join(where, name)) for name in ("leaf.key", "ca.pem"))


def _openssl(openssl: str, args: list[str], cwd: str) -> None:
    try:
        done = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True,
                              timeout=30, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CertificateError(f"openssl did not run: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise CertificateError(f"openssl {args[0]} failed: {last}")


def _make(openssl: str, where: str, hosts: tuple[str, ...]) -> None:
    """CA, leaf and chain in `where` (a fresh private directory); the CA key removed."""
    names = ",".join(f"DNS:{h}" for h in hosts)
    constraints = ",".join(f"permitted;DNS:{h}" for h in hosts)
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(openssl, ["req", "-x509", *curve, "-keyout", "ca.key", "-out", "ca.pem",
                       "-days", str(LEAF_DAYS + 1), "-subj",
                       "/CN=claude-sandbox credential broker", "-addext",
                       "basicConstraints=critical,CA:TRUE,pathlen:0", "-addext",
                       "keyUsage=critical,keyCertSign", "-addext",
                       f"nameConstraints=critical,{constraints}"], where)
    with open(os.path.join(where, "leaf.ext"), "w") as handle:
        handle.write(f"basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                     f"extendedKeyUsage=serverAuth\nsubjectAltName={names}\n")
    _openssl(openssl, ["req", "-new", *curve, "-keyout", "leaf.key", "-out", "leaf.csr",
                       "-subj", f"/CN={hosts[0]}"], where)
    _openssl(openssl, ["x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                       "-days", str(LEAF_DAYS), "-extfile", "leaf.ext", "-out", "leaf.only",
                       "-set_serial", str(int.from_bytes(os.urandom(8), "big"))], where)
    for name in ("ca.key", "leaf.csr", "leaf.ext"):
        os.unlink(os.path.join(where, name))  # the CA signs nothing again
    with open(os.path.join(where, "leaf.pem"), "w") as chain:
        for name in ("leaf.only", "ca.pem"):
            with open(os.path.join(where, name)) as part:
                chain.write(part.read())
    os.unlink(os.path.join(where, "leaf.only"))


def ensure(store: str, hosts: tuple[str, ...]) -> Leaf:
    """The leaf for `hosts`, made when missing or old; CertificateError saying why not.
    One launch at a time decides and makes (a lock in the directory): two launches
    remaking at once would each replace the other's pair under its proxy."""
    import fcntl

    where = directory(store, hosts)
    parent = os.path.dirname(where)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    lock = os.open(os.path.join(parent, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _sweep(parent)
        if not _fresh(where):
            openssl = paths.find_tool("openssl")
            if openssl is None:
                raise CertificateError("openssl is not installed (apt-get install openssl)")
            fresh = tempfile.mkdtemp(prefix=".new-", dir=parent)
            try:
                _make(openssl, fresh, hosts)
                if os.path.exists(where):
                    os.rename(where, fresh + ".old")
                os.rename(fresh, where)
            finally:
                shutil.rmtree(fresh, ignore_errors=True)
                shutil.rmtree(fresh + ".old", ignore_errors=True)
        return _leaf(where)
    finally:
        os.close(lock)  # and with it the lock


def _leaf(where: str) -> Leaf:
    with open(os.path.join(where, "ca.pem")) as handle:
        return Leaf(os.path.join(where, "leaf.pem"), os.path.join(where, "leaf.key"),
                    handle.read())


def existing(store: str, hosts: tuple[str, ...]) -> Leaf | None:
    """The leaf `ensure` would use now, read only (`explain`, which makes nothing); None
    when the next launch makes it."""
    where = directory(store, hosts)
    try:
        return _leaf(where) if _fresh(where) else None
    except OSError:
        return None


def preview(store: str, hosts: tuple[str, ...]) -> Leaf:
    """What `ensure` would give, made of nothing (`explain`): the leaf already made, or
    one whose CA says it is made at the launch; CertificateError where `ensure` would
    fail for want of openssl."""
    leaf = existing(store, hosts)
    if leaf is not None:
        return leaf
    if paths.find_tool("openssl") is None:
        raise CertificateError("openssl is not installed (apt-get install openssl)")
    return Leaf("", "", "# the broker's CA: made at the launch\n")


def _sweep(parent: str) -> None:
    """What a launch killed while making left: a half-made pair may still hold a CA key."""
    for name in os.listdir(parent):
        if name.startswith(".new-"):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
