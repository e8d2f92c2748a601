"""Runs INSIDE a sandbox (system python3, standard library only) and reports what it sees.

Usage: probe.py TOKEN SECRET_FILE READ... -- WRITE_DIR_OR_SOCKET... : prints one JSON object.
The secret comes in a file, never on a command line (cmdline is readable by all).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys


def _status() -> dict[str, str]:
    fields = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return fields


def _readable(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return "read:" + handle.read(200).decode(errors="replace")
    except OSError as error:
        return f"error:{errno.errorcode.get(error.errno, error.errno)}"


def _try_write(directory: str, token: str) -> str:
    target = os.path.join(directory, f".probe-{token}")
    try:
        with open(target, "w") as handle:
            handle.write(token)
    except OSError as error:
        return f"error:{errno.errorcode.get(error.errno, error.errno)}"
    return "written"


def _proc_leaks(secret: str) -> list[str]:
    leaks = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for part in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as handle:
                    if secret.encode() in handle.read():
                        leaks.append(f"{pid}/{part}")
            except OSError:
                pass
    return leaks


def _connect_unix(path: str) -> str:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(path)
    except OSError as error:
        return f"error:{errno.errorcode.get(error.errno, error.errno)}"
    finally:
        client.close()
    return "connected"


def main() -> None:
    token = sys.argv[1]
    with open(sys.argv[2]) as handle:
        secret = handle.read().strip()
    args = sys.argv[3:]
    split = args.index("--")
    read_paths, write_dirs, sockets = args[:split], [], []
    for item in args[split + 1 :]:
        (sockets if item.endswith(".sock") else write_dirs).append(item)
    status = _status()
    home = os.environ.get("HOME", "/")
    report = {
        "uid": os.getuid(),
        "env": dict(os.environ),
        "home": sorted(os.listdir(home)),
        "config_dir": sorted(os.listdir(os.path.join(home, ".config")))
        if os.path.isdir(os.path.join(home, ".config"))
        else None,
        "CapEff": status.get("CapEff"),
        "NoNewPrivs": status.get("NoNewPrivs"),
        "NSpid": status.get("NSpid"),
        "pidns": os.readlink("/proc/self/ns/pid"),
        "read": {path: _readable(path) for path in read_paths},
        "write": {path: _try_write(path, token) for path in write_dirs},
        "sockets": {path: _connect_unix(path) for path in sockets},
        "proc_leaks": _proc_leaks(secret),
        "tmp": sorted(os.listdir("/tmp")),
        "cwd": os.getcwd(),
    }
    print(json.dumps(report))


main()
