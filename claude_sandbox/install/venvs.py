"""The core venv with the package in it, and the operator tools' venv beside it."""

from __future__ import annotations

import compileall
import functools
import json
import py_compile
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from claude_sandbox import __version__
from claude_sandbox.core import paths
from claude_sandbox.install.report import (
    Report,
    run,
    sync,
)

SOURCE = Path(__file__).resolve().parents[1]  # the package: claude_sandbox/
TOOLS_REQUIREMENTS = ("rich", "pytest", "pytest-testinfra", "pyroute2", "jinja2", "pyyaml")
SYSTEM_PYTHON = "/usr/bin/python3"


def _package_files(include_tools: bool) -> Iterator[tuple[Path, Path]]:
    for source in sorted(SOURCE.rglob("*")):
        relative = source.relative_to(SOURCE)
        if "__pycache__" in relative.parts or source.is_dir():
            continue
        if not include_tools and relative.parts[0] == "tools":
            continue
        if source.suffix not in (".py", ".typed", ".c"):  # .c: doctor digests the sources
            continue
        yield source, Path("claude_sandbox") / relative


def _site_packages(venv: str) -> Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = Path(venv) / "bin" / "python"
    if python.exists():
        out = subprocess.run([str(python), "-I", "-c",
                              "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
        return Path(out)
    return Path(venv) / "lib" / version / "site-packages"


def package_dir(venv: str) -> Path:
    """Where `venv` holds this package."""
    return _site_packages(venv) / "claude_sandbox"


def _dist_info(files: list[Path]) -> dict[str, str]:
    """A minimal dist-info: the venv then holds exactly one distribution, ours."""
    name = f"claude_sandbox-{__version__}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: claude-sandbox\nVersion: {__version__}\n"
    record = [f"{path},," for path in (*map(str, files), f"{name}/METADATA",
                                        f"{name}/INSTALLER", f"{name}/RECORD")]
    return {
        f"{name}/METADATA": metadata,
        f"{name}/INSTALLER": "claude-sandbox-installer\n",
        f"{name}/RECORD": "\n".join(record) + "\n",
    }


def install_package(report: Report, venv: str, *, include_tools: bool) -> None:
    site = _site_packages(venv)
    pairs = list(_package_files(include_tools))
    wanted = {str(dest): src.read_text() for src, dest in pairs}
    wanted.update(_dist_info([dest for _, dest in pairs]))
    present = {
        str(p.relative_to(site))
        for p in site.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
        and p.relative_to(site).parts[0].startswith("claude_sandbox")
    } if site.exists() else set()
    sync(report, f"claude_sandbox {__version__} in {venv}", site, wanted, present, 0o644,
         lambda: compileall.compile_dir(
             str(site / "claude_sandbox"), quiet=1,
             invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH))


def make_venv(report: Report, venv: str, *, with_pip: bool) -> None:
    python = Path(venv) / "bin" / "python"
    def action() -> None:
        args = [SYSTEM_PYTHON, "-m", "venv"]
        if not with_pip:
            args.append("--without-pip")
        run([*args, venv])
    report.step(f"venv {venv}", not python.exists(), action)


def _pip_install(pip: str) -> None:
    run([pip, "install", "-q", *TOOLS_REQUIREMENTS])


def install_tools(report: Report) -> None:
    make_venv(report, paths.TOOLS_VENV, with_pip=True)
    pip = Path(paths.TOOLS_VENV) / "bin" / "pip"
    have = set()
    if pip.exists():
        out = subprocess.run([str(pip), "list", "--format=json"], capture_output=True,
                             text=True, check=False).stdout or "[]"
        have = {entry["name"].lower() for entry in json.loads(out)}
    missing = [req for req in TOOLS_REQUIREMENTS if req.lower() not in have]
    report.step(f"operator tools ({' '.join(missing) or 'all present'})", bool(missing),
                functools.partial(_pip_install, str(pip)))
    install_package(report, paths.TOOLS_VENV, include_tools=True)
