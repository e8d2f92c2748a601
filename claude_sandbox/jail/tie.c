/* claude-sandbox's tie: start a program that must end with the launcher that starts it.
 *
 *   tie PARENT [CGROUP_DIR...] -- PROGRAM [ARG...]
 *
 * pasta and the outside relays run beside a jailed session, and nothing would ever end
 * them if the launcher died, even by SIGKILL: the kernel must, by a parent-death signal
 * set before their exec (check 49). A fork of the launcher could set it itself, but a
 * fork copies the launcher's page tables and write-protects all of its memory, so that
 * every page the launcher writes afterwards faults once more: about 230 faults and
 * 1.4 ms of the launcher's CPU for pasta's start alone, measured, on the launch's
 * critical path (docs/adr/0004-launch-cost.md). The launcher posix_spawns this program
 * instead (glibc's clone shares the memory, copies nothing), and it, in turn:
 *
 * - sets SIGKILL as its parent-death signal, which the exec below keeps (PROGRAM must not
 *   be set-user-ID or gain capabilities by its exec: that clears the signal);
 * - ends with 127, running nothing, unless its parent is still PARENT: a launcher that
 *   died before the prctl would never send the signal;
 * - joins each CGROUP_DIR (writes "0" to its cgroup.procs), so that PROGRAM's memory and
 *   processes count against the launch's caps; where it cannot, it says so in one line
 *   on stderr and ends with 69 before PROGRAM runs;
 * - closes every descriptor above 2: the launcher opens its own close-on-exec and marks
 *   those it inherited so (check 102), and none of them is PROGRAM's either way;
 * - execs PROGRAM (an absolute path) with ARGs and its own environment.
 *
 * The streams, the session and SIGPIPE's and SIGXFSZ's defaults are posix_spawn's
 * (core/spawn.py spawn_tied). Anything not well formed ends with 64 and one line. Statically linked,
 * as the other programs.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_close_range
#define SYS_close_range 436 /* the unified table's number, x86_64 and aarch64 alike */
#endif

#define EXIT_USAGE 64
#define EXIT_UNAVAILABLE 69
#define EXIT_NOT_RUN 127

static int usage(const char *why) {
    fprintf(stderr, "claude-sandbox tie: %s\n", why);
    return EXIT_USAGE;
}

/* Every descriptor above 2, closed: close_range where the kernel has it, else each one
 * /proc/self/fd lists (never a loop up to a limit, which a descriptor above a lowered
 * soft limit would outlive). 0, or -1 where neither can be done. */
static int close_above_stderr(void) {
    if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0)
        return 0;
    DIR *listed = opendir("/proc/self/fd");
    if (listed == NULL)
        return -1;
    int own = dirfd(listed);
    struct dirent *entry;
    while ((entry = readdir(listed)) != NULL) {
        char *end;
        long fd = strtol(entry->d_name, &end, 10);
        if (*end == '\0' && end != entry->d_name && fd > 2 && fd != own)
            close((int)fd);
    }
    closedir(listed);
    return 0;
}

static int join(const char *directory) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/cgroup.procs", directory) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t wrote = write(fd, "0", 1); /* "0": the writing process */
    int saved = errno;
    close(fd);
    errno = saved;
    return wrote == 1 ? 0 : -1;
}

/* A process id in decimal digits alone, 1 to INT_MAX (1: a launcher that is its
 * container's first process, which a container run without an init makes it); -1
 * otherwise. */
static long process_id(const char *text) {
    long value = 0;
    if (*text == '\0')
        return -1;
    for (; *text != '\0'; text++) {
        if (*text < '0' || *text > '9' || value > (INT_MAX - (*text - '0')) / 10)
            return -1;
        value = value * 10 + (*text - '0');
    }
    return value >= 1 ? value : -1;
}

int main(int argc, char **argv) {
    if (argc < 4)
        return usage("usage: tie PARENT [CGROUP_DIR...] -- PROGRAM [ARG...]");
    long parent = process_id(argv[1]);
    if (parent < 0)
        return usage("PARENT is not a process id");
    int program = 2;
    while (program < argc && strcmp(argv[program], "--") != 0) {
        if (argv[program][0] != '/')
            return usage("a cgroup directory is not an absolute path");
        program++;
    }
    program++;
    if (program >= argc || argv[program][0] != '/')
        return usage("no PROGRAM, as an absolute path, after --");

    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || (long)getppid() != parent)
        return EXIT_NOT_RUN;
    /* glibc's posix_spawn leaves its two internal signals (the kernel's first two
     * real-time ones, 32 and 33) ignored, where a fork leaves them as the launcher has
     * them: at their defaults. glibc's sigaction refuses them; the kernel's takes an
     * all-zero action, whatever its layout: SIG_DFL, no flags, no mask. */
    unsigned long defaults[4] = {0};
    for (int sig = 32; sig <= 33; sig++) {
        if (syscall(SYS_rt_sigaction, sig, defaults, NULL, sizeof(unsigned long)) != 0) {
            fprintf(stderr, "claude-sandbox tie: cannot reset signal %d: %s\n", sig,
                    strerror(errno));
            return EXIT_UNAVAILABLE;
        }
    }
    for (int i = 2; strcmp(argv[i], "--") != 0; i++) {
        if (join(argv[i]) != 0) {
            fprintf(stderr, "claude-sandbox: the launch stops: its cgroup cannot be joined, "
                    "so max-pids and max-memory would not hold (cannot write to "
                    "%s/cgroup.procs: %s)\n", argv[i], strerror(errno));
            return EXIT_UNAVAILABLE;
        }
    }
    if (close_above_stderr() != 0) {
        fputs("claude-sandbox tie: cannot close the descriptors it inherited\n", stderr);
        return EXIT_UNAVAILABLE;
    }
    execv(argv[program], &argv[program]);
    fprintf(stderr, "claude-sandbox tie: cannot run %s: %s\n", argv[program], strerror(errno));
    return EXIT_NOT_RUN;
}
