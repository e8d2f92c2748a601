"""Runs inside the sandbox and prints one JSON line of what the kernel said.

Standard library only; invoked as `python3 -I probe.py COMMAND [ARGS]`.
"""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import signal
import socket
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

# x86_64 numbers; the kernel tests run on this machine's architecture.
CALLS = {
    "ptrace": (101, 2, 1, 0, 0),  # PEEKDATA on a non-tracee: ESRCH unless refused
    "process_vm_readv": (310, 1, 0, 0, 0, 0, 0),
    "process_vm_writev": (311, 1, 0, 0, 0, 0, 0),
    "pidfd_getfd": (438, -1, 0, 0),
    "bpf": (321, 0, 0, 0),
    "perf_event_open": (298, 0, 0, -1, -1, 0),
    "keyctl": (250, 0, 0, 0, 0, 0),
    "add_key": (248, 0, 0, 0, 0, 0),
    "request_key": (249, 0, 0, 0, 0),
    "userfaultfd": (323, 1),  # UFFD_USER_MODE_ONLY: allowed unprivileged
    "io_uring_setup": (425, 0, 0),
    "io_uring_enter": (426, -1, 0, 0, 0, 0, 0),
    "io_uring_register": (427, -1, 0, 0, 0),
    "kexec_load": (246, 0, 0, 0, 0),
    "kexec_file_load": (320, -1, -1, 0, 0, 0),
    "init_module": (175, 0, 0, 0),
    "finit_module": (313, -1, 0, 0),
    "delete_module": (176, 0, 0),
    "open_by_handle_at": (304, -1, 0, 0),
    "ioctl_TIOCSTI": (16, 0, 0x5412, 0),
    "ioctl_TIOCSTI_junk": (16, 0, 0xDEADBEEF_00005412, 0),
    "ioctl_TIOCLINUX": (16, 0, 0x541C, 0),
    "ioctl_TIOCLINUX_junk": (16, 0, 0x1_0000541C, 0),
    "ioctl_TIOCGWINSZ": (16, 0, 0x5413, 0),
    "clone3": (435, 0, 0),
    "getpid": (39,),
}


def raw(nr: int, *args: int) -> str:
    ret = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if ret == -1:
        return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    return "ok"


def errnos() -> dict[str, object]:
    out: dict[str, object] = {name: raw(*call) for name, call in CALLS.items()}
    pid = os.fork()
    if pid == 0:  # unshare(CLONE_NEWUSER) in a child: it changes the caller for good
        os._exit(0 if raw(272, 0x10000000) == "ok" else 1)
    out["unshare_newuser"] = os.waitpid(pid, 0)[1] == 0
    return out


def int80() -> dict[str, object]:
    # mov eax, 20 (i386 getpid); int 0x80; ret -- the i386 ABI from a 64-bit process.
    code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"
    buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    print("before", flush=True)
    result = ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
    return {"survived": True, "result": result}


def x32() -> dict[str, object]:
    print("before", flush=True)
    return {"survived": True, "result": raw(0x40000000 | 39)}


def kill(pid: str) -> dict[str, object]:
    try:
        os.kill(int(pid), signal.SIGTERM)
        return {"kill": "ok"}
    except OSError as exc:
        return {"kill": errno.errorcode[exc.errno or 0]}


def abstract(name: str) -> dict[str, object]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\0" + name)
        return {"connect": "ok"}
    except OSError as exc:
        return {"connect": errno.errorcode[exc.errno or 0]}
    finally:
        s.close()


def forkbomb(limit: str) -> dict[str, object]:
    kids: list[int] = []
    reason = "none"
    try:
        for _ in range(int(limit)):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            kids.append(pid)
    except OSError as exc:
        reason = errno.errorcode[exc.errno or 0]
    for pid in kids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return {"forked": len(kids), "stopped_by": reason}


def allocate(mib: str) -> dict[str, object]:
    pid = os.fork()
    if pid == 0:
        try:
            block = bytearray(int(mib) << 20)
            for i in range(0, len(block), 4096):  # touch every page: a cgroup charges on use
                block[i] = 1
            os._exit(0)
        except MemoryError:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return {
        "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "parent_alive": True,
    }


COMMANDS = {
    "errnos": errnos, "int80": int80, "x32": x32, "kill": kill, "abstract": abstract,
    "forkbomb": forkbomb, "allocate": allocate,
}  # fmt: skip

if __name__ == "__main__":
    print(json.dumps(COMMANDS[sys.argv[1]](*sys.argv[2:])), flush=True)  # type: ignore[operator]
