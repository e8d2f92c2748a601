"""The Linux constants the package passes to the kernel itself, in one place.

Each is the value of the uapi header named beside it; the same on x86_64 and aarch64
(the system call numbers are from the unified table, 424 and up). libc and the os
module expose few of them, and the launch imports as little as it can, so they are
written here once rather than beside each call.
"""

from __future__ import annotations

# linux/sched.h: clone(2), unshare(2) and setns(2) flags.
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

# linux/mount.h: mount(2) flags.
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

# linux/mount.h, linux/fcntl.h: mount_setattr(2).
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOEXEC = 0x8
AT_FDCWD = -100
AT_RECURSIVE = 0x8000

# linux/prctl.h.
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
PR_SET_NO_NEW_PRIVS = 38

# asm-generic/unistd.h, the unified table: the same number on every architecture.
SYS_MOUNT_SETATTR = 442
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446

# asm-generic/resource.h: setrlimit(2) resources (the resource module's, without loading
# its extension at every launch).
RLIMIT_DATA = 2
RLIMIT_CORE = 4
RLIMIT_NPROC = 6
RLIMIT_NOFILE = 7
RLIM_INFINITY = (1 << 64) - 1  # rlim_t's all ones: 64 bits on x86_64 and aarch64
