"""The install hint's script, run by sh with stand-in programs: when it speaks, that it
speaks once, and that the real program always runs with the same arguments."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from claude_sandbox.install import hints
from claude_sandbox.launch.planner import environment

HINT = "claude-sandbox: outside the workspace is read-only"


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """A hints directory with every name, and a `real` directory of stand-ins that print
    their arguments one a line and exit 3."""
    marker = tmp_path / "marker"
    hinted, real = tmp_path / "hints", tmp_path / "real"
    hinted.mkdir()
    real.mkdir()
    for name, text in hints.wanted().items():
        script = hinted / name
        script.write_text(text.replace(hints.MARKER, str(marker)))
        script.chmod(0o755)
        stand_in = real / name
        stand_in.write_text('#!/bin/sh\nfor a; do printf "%s\\n" "$a"; done\nexit 3\n')
        stand_in.chmod(0o755)
    return tmp_path


def run(place: Path, name: str, *args: str, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    path = f"{place / 'hints'}::{place / 'hints'}:{place / 'real'}"
    return subprocess.run([str(place / "hints" / name), *args], capture_output=True,
                          text=True, env={"PATH": path, **(env or {})}, check=False)


@pytest.mark.parametrize("argv", [
    ("apt-get", "install", "-y", "curl"), ("apt", "update"), ("dpkg", "-i", "x.deb"),
    ("rpm", "-ivh", "x.rpm"), ("pacman", "-Syu"), ("apk", "add", "curl"),
    ("dnf", "install", "x"), ("npm", "install", "-g", "x"), ("npm", "i", "--global", "x"),
    ("pnpm", "add", "-g", "x"), ("yarn", "global", "add", "x"), ("pip", "install", "x"),
    ("pip3", "uninstall", "x"), ("gem", "install", "x"), ("cargo", "install", "ripgrep"),
])
def test_an_install_outside_the_workspace_gets_the_hint_and_still_runs(
        place: Path, argv: tuple[str, ...]) -> None:
    result = run(place, *argv)
    assert result.returncode == 3  # the real program's own status
    assert result.stdout.splitlines() == list(argv[1:])
    assert result.stderr.startswith(HINT) and f"`{argv[0]}`" in result.stderr
    assert "allow-write" in result.stderr


@pytest.mark.parametrize("argv", [
    ("apt-get", "--version"), ("apt", "search", "curl"), ("dpkg", "-l"),
    ("pacman", "-Ss", "x"), ("npm", "install"), ("npm", "install", "left-pad"),
    ("yarn", "add", "x"), ("pip", "install", "--user", "x"),
    ("pip", "install", "--target=lib", "x"), ("pip3", "list"),
    ("gem", "install", "--user-install", "x"), ("cargo", "install", "--root", "out", "x"),
    ("cargo", "build"),
])
def test_anything_else_runs_without_a_word(place: Path, argv: tuple[str, ...]) -> None:
    result = run(place, *argv)
    assert (result.returncode, result.stderr) == (3, "")
    assert result.stdout.splitlines() == list(argv[1:])


def test_a_chosen_environment_is_not_outside(place: Path) -> None:
    assert run(place, "pip", "install", "x", env={"VIRTUAL_ENV": "/w/.venv"}).stderr == ""
    assert run(place, "gem", "install", "x", env={"GEM_HOME": "/w/gems"}).stderr == ""


def test_the_hint_is_said_once_a_session(place: Path) -> None:
    assert run(place, "apt-get", "install", "x").stderr.startswith(HINT)
    assert run(place, "npm", "-g", "install", "x").stderr == ""
    assert (place / "marker").exists()


def test_arguments_pass_unchanged(place: Path) -> None:
    odd = ["install", "a b", "*", "", "-$x", "line\nbreak", "--"]
    assert run(place, "apt-get", *odd).stdout.split("\n")[:-1] == \
        ["install", "a b", "*", "", "-$x", "line", "break", "--"]


def test_without_the_real_program_it_says_not_found(place: Path) -> None:
    os.unlink(place / "real" / "cargo")
    result = run(place, "cargo", "install", "x")
    assert (result.returncode, result.stderr) == (127, "cargo: command not found\n")


def test_the_sandbox_lists_the_hints_first_on_path() -> None:
    class Facts:
        home = "/home/u"
        path = (environment.HINTS_DIR, "/usr/bin", "/home/u/.local/bin", "/bin")

    inner = environment.inner_path(Facts())  # type: ignore[arg-type]
    assert inner.split(":") == [hints.HINTS_DIR, "/usr/bin", "/bin", "/home/u/.local/bin"]


def test_a_marker_that_cannot_be_written_still_runs_the_real_program(place: Path) -> None:
    script = place / "hints" / "apt-get"
    script.write_text(hints.SCRIPT.replace(hints.MARKER, str(place / "absent" / "marker")))
    for shell in ("/bin/sh", "/bin/bash"):
        result = subprocess.run([shell, str(script), "install", "x"], capture_output=True,
                                text=True, check=False,
                                env={"PATH": f"{place / 'hints'}:{place / 'real'}"})
        assert result.returncode == 3 and result.stdout == "install\nx\n", result
        assert result.stderr.startswith(HINT)


@pytest.mark.parametrize("spelling", ["{hints}/", "{hints}//.", "{link}", "."])
def test_the_script_never_runs_itself_however_path_spells_its_directory(
        place: Path, spelling: str) -> None:
    (place / "link").symlink_to(place / "hints")
    first = spelling.format(hints=place / "hints", link=place / "link")
    env = {"PATH": f"{first}:{place / 'hints'}:{place / 'real'}"}
    result = subprocess.run([str(place / "hints" / "npm"), "-g", "i", "x"], cwd=place / "hints",
                            capture_output=True, text=True, check=False, env=env, timeout=10)
    assert result.returncode == 3 and result.stdout == "-g\ni\nx\n", result
