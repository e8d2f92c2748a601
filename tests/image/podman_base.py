"""The podman tests' shared parts: the offline base, the image build, containers.

No registry is reachable from CI, so the base comes from image/offline-base.sh
(debootstrap and this machine's own Node 20) and the image from image/build.sh,
the two commands docs/how-to/image.md gives a user. The debootstrap tree and the
base are cached (CACHE_DIR, BASE_IMAGE): a second run costs nothing.
"""

from __future__ import annotations

import atexit
import itertools
import os
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
# The flags docs/how-to/image.md gives for `podman run` and `docker run`.
RUN_FLAGS = ("--init", "--device", "/dev/net/tun")


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


def ensure_base_image() -> str:
    """The offline base, made by the script a user runs too (docs/how-to/image.md)."""
    use_test_containers_conf()
    env = {**os.environ, "BASE_TAG": BASE_IMAGE, "BASE_CACHE": str(CACHE_DIR)}
    result = subprocess.run([str(REPO / "image" / "offline-base.sh")], env=env,
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"image/offline-base.sh failed:\n{result.stderr[-4000:]}")
    return result.stdout.strip()


_BUILT: list[float] = []
_CLEANUP: list[bool] = []

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


# What one test run's images take in root's storage, measured: 3.3 GB after a build (the
# build stage's layers and the final image share the base), with the rootless and the
# dev-container tests' copies on top.
BUILD_NEEDS_GB = 6.0
# The final image's label (image/Dockerfile): how an untagged image of ours is known.
OUR_LABEL = "io.github.claude-sandbox.version"
CLI_CONTENT = "localhost/dev_container_feature_content_temp"


def _images() -> list[tuple[str, str, int, bool]]:
    """(id, parent, created, an untagged image of ours) for every image in root's storage:
    an untagged image with the image's label is the test image of an earlier run (a
    build moved the tag on), or one of a user's builds that nothing names any more."""
    ids = subprocess.run([*PODMAN, "images", "-aq", "--no-trunc"], capture_output=True,
                         text=True, check=False).stdout.split()
    if not ids:
        return []
    lines = subprocess.run(
        [*PODMAN, "image", "inspect", "--format",
         "{{.Id}} {{.Parent}}x {{.Created.UnixNano}} {{len .RepoTags}} {{index .Labels \""
         + OUR_LABEL + "\"}}x", *ids],
        capture_output=True, text=True, check=False).stdout.splitlines()
    found = []
    for line in lines:
        image, parent, created, tags, label = line.split(" ", 4)
        found.append((image, parent[:-1], int(created),
                      tags == "0" and label[:-1] not in ("", "<no value>")))
    return found


def _image_id(name: str) -> str:
    return subprocess.run([*PODMAN, "image", "inspect", "--format", "{{.Id}}", name],
                          capture_output=True, text=True, check=False).stdout.strip()


def remove_our_images() -> None:
    """Remove what test runs left in root's storage, newest first so that children go
    before their parents:
    - the test image (IMAGE) and untagged images with the image's label, with their
      ancestors down to the test base;
    - everything built on the private test base (the dev container CLI tags what it
      builds vsc-...), and the CLI's image of the Feature's files with what it made of it.
    The base stays (the cache that makes the next build cheap). No other tagged image is
    touched, a user's own build of the image included; one of those that a later build
    left untagged goes with the test's, as nothing names it any more.
    """
    images = _images()
    parent = {image: up for image, up, _, _ in images}
    base = _image_id(BASE_IMAGE)

    roots = [image for image, _, _, stale in images if stale] + [_image_id(IMAGE)]
    # Each root with its ancestors, up to (not with) the base.
    doomed = {image for root in roots if root
              for image in itertools.takewhile(lambda i: i != base, _ancestry(root, parent))}
    # Whatever descends from the base, or from the dev container CLI's image of the
    # Feature's files (which it makes from scratch), and that image itself.
    content = _image_id(CLI_CONTENT)
    for top in (base, content):
        if top:
            doomed |= {image for image, *_ in images if top in _ancestry(image, parent)}
    doomed.discard(base)
    created = {image: when for image, _, when, _ in images}
    for image in sorted(doomed, key=lambda i: created.get(i, 0), reverse=True):
        subprocess.run([*PODMAN, "rmi", "-f", image], capture_output=True, check=False)


def _ancestry(image: str, parent: dict[str, str]) -> list[str]:
    """`image`, its parent, its parent's parent, ...: nearest first."""
    seen: list[str] = []
    while image and image not in seen:
        seen.append(image)
        image = parent.get(image, "")
    return seen


def check_room() -> None:
    """Refuse, in one line, a build that would stop part way for want of disk."""
    root = subprocess.run([*PODMAN, "info", "--format", "{{.Store.GraphRoot}}"],
                          capture_output=True, text=True, check=False).stdout.strip()
    free = shutil.disk_usage(root or "/var/lib").free / 1e9
    if free < BUILD_NEEDS_GB:
        raise RuntimeError(f"{free:.1f} GB free under {root}; the image tests need about "
                           f"{BUILD_NEEDS_GB:.0f} GB: free some (`podman image prune` removes "
                           "the images nothing uses)")


def build_image(tag: str = IMAGE) -> float:
    """Build with image/build.sh on the offline base, as the how-to says; returns seconds.

    What earlier runs left goes first, and what this run builds goes when it ends.
    """
    ensure_base_image()
    if not _BUILT and not _CLEANUP:
        remove_our_images()
        _CLEANUP.append(True)
        atexit.register(remove_our_images)
    check_room()
    context = source_snapshot()
    started = time.monotonic()
    env = {**os.environ, "BASE_TAG": BASE_IMAGE, "BASE_CACHE": str(CACHE_DIR),
           "CLAUDE_CODE_VERSION": AGENT_VERSIONS["claude"],
           "CODEX_VERSION": AGENT_VERSIONS["codex"], "PI_VERSION": AGENT_VERSIONS["pi"]}
    # Niced and without the namespace lock: a long build must not hold up others.
    # --force-rm: a failed build must not leave its working container mounted
    # (each one is an overlay mount every later bwrap walks).
    result = subprocess.run(["nice", "-n", "10", str(context / "image" / "build.sh"),
                             "--offline-base", "--tag", tag, "--",
                             "--isolation", "chroot", "--force-rm"],
                            env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-6000:]
        raise RuntimeError(f"image/build.sh failed:\n{tail}")
    return time.monotonic() - started


# What tool_call.py needs of the operator's file: the mock API is on the container's
# 127.0.0.1, which the jail keeps out, and the agents take their keys from the variables.
TOOL_CALL_CONF = ("env-may-widen = egress-jail\\npass-env = ANTHROPIC_API_KEY\\n"
                  "pass-env = ANTHROPIC_BASE_URL\\npass-env = CODEX_MOCK_API_KEY\\n"
                  "pass-env = CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC\\n")



def image_once() -> str:
    """IMAGE, built at most once per test run (the image and the pod tests share it)."""
    if not _BUILT:
        _BUILT.append(build_image())
        print(f"\nimage build: {_BUILT[0]:.0f} s (base cached: {BASE_IMAGE})")
    return IMAGE


def start(image: str, name: str, *extra: str) -> str:
    """A detached container that idles, for exec-based checks; removed first if left over."""
    subprocess.run([*PODMAN, "rm", "-f", "-t", "0", name], capture_output=True, check=False)
    # --init (in RUN_FLAGS): with `sleep` as PID 1 nothing reaps the orphans a finished
    # launch leaves to it, and verify's check 35 (no leftovers) rightly counts the zombies.
    subprocess.run([*PODMAN, "run", "-d", "--name", name, *RUN_FLAGS, *extra, image,
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


# Docker's default seccomp profile, as Debian ships it with the engine's sources (from the
# package mirror, the only network CI has); deploy/seccomp/make_profile.py extends it.
DOCKER_SOURCES = "golang-github-docker-docker-dev"
DOCKER_DEFAULT_IN_PACKAGE = ("usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/"
                             "default.json")
MAKE_PROFILE = REPO / "deploy" / "seccomp" / "make_profile.py"


def docker_default_profile() -> Path:
    """Docker's default profile, downloaded once into CACHE_DIR."""
    where = CACHE_DIR / "docker-seccomp"
    profile = where / DOCKER_DEFAULT_IN_PACKAGE
    if not profile.exists():
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", "-q", DOCKER_SOURCES], cwd=where, check=True,
                       capture_output=True)
        package = next(where.glob(f"{DOCKER_SOURCES}_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(package), str(where)], check=True)
    return profile


def make_profile(dest: Path) -> Path:
    """The profile the how-to has a user make: Docker's default and the sandbox's rule."""
    with dest.open("w") as out:
        subprocess.run([sys.executable, str(MAKE_PROFILE), str(docker_default_profile())],
                       stdout=out, check=True)
    return dest


if __name__ == "__main__":
    print(ensure_base_image())
    sys.exit(0)
