"""Build (once) an offline Debian bookworm base image with Node >= 20, for podman tests.

No registry is reachable from CI, so the base comes from debootstrap and the
machine's own Node 20 (FACTS.md "Containers"): Debian 12's nodejs is 18, and
the machine's Node 20 is an installed package apt cannot fetch again, so it is
repacked with dpkg-repack; its npm was upgraded in place and is broken in the
repack, so the machine's /usr/lib/node_modules/npm is copied beside it.

The debootstrap tree and the image are cached (CACHE_DIR, BASE_IMAGE): a second
run costs nothing. `python -m tests.image.podman_base` builds it by hand.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

CACHE_DIR = Path(os.environ.get("CLAUDE_SANDBOX_TEST_CACHE", "/var/cache/claude-sandbox-test"))
BASE_IMAGE = "localhost/claude-sandbox-test-base:bookworm-node20"
IMAGE = "localhost/claude-sandbox-test:latest"
LOCK = "/tmp/claude-sandbox-ns.lock"
REPO = Path(__file__).resolve().parents[2]
# The agent versions the tests pin (the machine's install has the same ones).
AGENT_VERSIONS = {"claude": "2.1.197", "codex": "0.171.0", "pi": "0.73.1"}
# podman 4.3 on a cgroup v1+v2 hybrid host: crun fails, runc with cgroupfs works.
# Put in a containers.conf (CONTAINERS_CONF) rather than on each command line so
# that testinfra's podman:// backend, which runs a bare `podman exec`, gets them too.
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""
PODMAN = ("podman",)
RUN_FLAGS = ("--device", "/dev/net/tun")


def use_test_containers_conf() -> None:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    conf = CACHE_DIR / "containers.conf"
    if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
        conf.write_text(CONTAINERS_CONF)
    os.environ["CONTAINERS_CONF"] = str(conf)


def missing_tools() -> list[str]:
    return [t for t in ("podman", "debootstrap", "dpkg-repack", "runc") if not shutil.which(t)]


# The podman tests' marks. Outside CI they skip, saying why, on a machine without the
# tools or as a normal user; in CI (.ci/run installs the tools and runs as root) a
# missing tool must fail the run, not hide a missing install step behind a skip.
_IN_CI = os.environ.get("CI") == "true"
MARKS = [
    pytest.mark.image,
    pytest.mark.skipif(not _IN_CI and os.getuid() != 0, reason="podman tests run as root"),
    pytest.mark.skipif(not _IN_CI and bool(missing_tools()),
                       reason=f"missing: {' '.join(missing_tools())} (apt-get install them)"),
]


def image_exists(name: str) -> bool:
    return subprocess.run([*PODMAN, "image", "exists", name], check=False).returncode == 0


def debian_mirror() -> str:
    """The Debian mirror this machine's apt already uses (deb822 or one-line sources)."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for source in sources:
        try:
            text = source.read_text()
        except OSError:
            continue
        for match in re.finditer(r"(?:URIs:\s*|^deb\s+(?:\[[^]]*\]\s+)?)(\S+)", text, re.M):
            uri = match.group(1)
            if "security" not in uri and "debian" in uri:
                return uri
    return "http://deb.debian.org/debian"


def _node_deb() -> Path:
    out = CACHE_DIR / "node"
    debs = sorted(out.glob("nodejs_*.deb"))
    if debs:
        return debs[-1]
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-repack", "nodejs"], cwd=out, check=True, capture_output=True)
    return sorted(out.glob("nodejs_*.deb"))[-1]


def _rootfs() -> Path:
    root = CACHE_DIR / "rootfs"
    done = CACHE_DIR / "rootfs.done"
    if done.exists():
        return root
    bootstrapped = CACHE_DIR / "rootfs.debootstrapped"
    if not bootstrapped.exists():
        if root.exists():
            shutil.rmtree(root)
        subprocess.run(["debootstrap", "--variant=minbase", "--include=python3,ca-certificates",
                        "bookworm", str(root), debian_mirror()], check=True, capture_output=True)
        bootstrapped.touch()
    deb = _node_deb()
    shutil.copy(deb, root / "tmp" / deb.name)
    subprocess.run(["chroot", str(root), "dpkg", "-i", f"/tmp/{deb.name}"], check=True,
                   capture_output=True)
    (root / "tmp" / deb.name).unlink()
    npm = root / "usr/lib/node_modules/npm"
    if npm.exists():
        shutil.rmtree(npm)
    shutil.copytree("/usr/lib/node_modules/npm", npm, symlinks=True)
    link = root / "usr/bin/npm"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to("../lib/node_modules/npm/bin/npm-cli.js")
    # The machine's apt sources and npm registry setting: the image build fetches
    # through the same mirrors CI may reach.
    shutil.copytree("/etc/apt/sources.list.d", root / "etc/apt/sources.list.d",
                    dirs_exist_ok=True)
    if Path("/etc/apt/sources.list").exists():
        shutil.copy("/etc/apt/sources.list", root / "etc/apt/sources.list")
    # A TLS-intercepting egress proxy's CA, if this machine trusts one.
    for cert in Path("/usr/local/share/ca-certificates").glob("*.crt"):
        shutil.copy(cert, root / "usr/local/share/ca-certificates" / cert.name)
    subprocess.run(["chroot", str(root), "update-ca-certificates"], check=True,
                   capture_output=True)
    for npmrc in ("/etc/npmrc", "/usr/etc/npmrc"):
        if Path(npmrc).exists():
            (root / npmrc.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(npmrc, root / npmrc.lstrip("/"))
    subprocess.run(["chroot", str(root), "apt-get", "clean"], check=True, capture_output=True)
    done.touch()
    return root


def ensure_base_image() -> str:
    use_test_containers_conf()
    if image_exists(BASE_IMAGE):
        return BASE_IMAGE
    root = _rootfs()
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    # npm reads its cafile setting from PREFIX/etc/npmrc, and the installer runs
    # npm with its own --prefix: the extra CA has to come through node's variable.
    # A tar import has no environment at all; give it the PATH a registry image has.
    changes = ["--change", "ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt",
               "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    subprocess.run([*PODMAN, "import", *changes, "-", BASE_IMAGE], stdin=tar.stdout,
                   check=True, capture_output=True)
    if tar.wait() != 0:
        raise RuntimeError("tar of the base rootfs failed")
    return BASE_IMAGE


SOURCE_PARTS = ("install.sh", "pyproject.toml", "claude_sandbox", "verification", "image",
                "feature")


def source_snapshot() -> Path:
    """One copy of the sources for a whole test run, made once.

    The image, the install cycle and the Feature all install from it, so they
    install the same code even while the working tree changes under a long run.
    CLAUDE_SANDBOX_TEST_FROM_HEAD=1 takes the last commit instead of the working tree.
    """
    dest = CACHE_DIR / f"source-{os.getpid()}"
    if (dest / "install.sh").exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    if os.environ.get("CLAUDE_SANDBOX_TEST_FROM_HEAD") == "1":
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD", *SOURCE_PARTS],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    else:
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "dist")
        for part in SOURCE_PARTS:
            source = REPO / part
            if source.is_dir():
                shutil.copytree(source, dest / part, ignore=ignore, symlinks=True)
            else:
                shutil.copy2(source, dest / part)
    atexit.register(shutil.rmtree, dest, True)
    return dest


def build_image(tag: str = IMAGE) -> float:
    """Build image/Dockerfile on the offline base; returns the seconds it took."""
    base = ensure_base_image()
    context = source_snapshot()
    started = time.monotonic()
    args = [f"--build-arg=BASE_IMAGE={base}",
            f"--build-arg=CLAUDE_CODE_VERSION={AGENT_VERSIONS['claude']}",
            f"--build-arg=CODEX_VERSION={AGENT_VERSIONS['codex']}",
            f"--build-arg=PI_VERSION={AGENT_VERSIONS['pi']}"]
    # Niced and without the namespace lock: a long build must not hold up others.
    # --force-rm: a failed build must not leave its working container mounted
    # (each one is an overlay mount every later bwrap walks).
    result = subprocess.run(["nice", "-n", "10", *PODMAN, "build", "--isolation", "chroot",
                             "--force-rm", "-f", "image/Dockerfile", *args, "-t", tag, "."],
                            cwd=context, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-6000:]
        raise RuntimeError(f"podman build failed:\n{tail}")
    return time.monotonic() - started


def start(image: str, name: str, *extra: str) -> str:
    """A detached container that idles, for exec-based checks; removed first if left over."""
    subprocess.run([*PODMAN, "rm", "-f", "-t", "0", name], capture_output=True, check=False)
    # --init: with `sleep` as PID 1 nothing reaps the orphans a finished launch
    # leaves to it, and verify's check 35 (no leftovers) rightly counts the zombies.
    subprocess.run([*PODMAN, "run", "-d", "--init", "--name", name, *RUN_FLAGS, *extra, image,
                    "sleep", "infinity"], check=True, capture_output=True)
    return name


def stop(name: str) -> None:
    subprocess.run([*PODMAN, "rm", "-f", "-t", "0", name], capture_output=True, check=False)


def execute(name: str, command: str, *, user: str = "root", env: dict[str, str] | None = None,
            workdir: str = "/workspace", lock: bool = True,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`bash -c command` in the container; namespaces are built under the shared lock."""
    flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
    argv = [*PODMAN, "exec", "--user", user, "--workdir", workdir, *flags, name,
            "bash", "-c", command]
    if lock:
        argv = ["flock", LOCK, *argv]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)


if __name__ == "__main__":
    print(ensure_base_image())
    sys.exit(0)
