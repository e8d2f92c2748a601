/* claude-sandbox's inner stage for `hardening = standard`: the last step inside bwrap.
 *
 * bwrap execs `enter FD`, where FD holds the plan's inner record (inside/spec.py's wire
 * form). This program does what inside/enter.py does at the standard level, in the same
 * order, and nothing else: it checks every field of the record as spec.decode does, asks
 * the launcher's /proc helper for the late masks (inside/prochide.py), gives the agent
 * its signal dispositions back, sets the rlimits, on a terminal stays as the agent's
 * parent to pass its Ctrl-Z on, enters the Landlock domain that scopes signals and
 * abstract unix sockets, and execs the agent. The seccomp filter is already in force
 * (bwrap loaded it); everything set here is inherited by the agent and cannot be undone.
 *
 * Why C (docs/adr/0017-the-inner-stage-in-c.md): the Python stage starts an interpreter
 * at every launch, 17 ms on the bench's machine, against half a millisecond for a
 * static program. The harsh and brokered levels keep the Python stage: harsh plans its
 * EXECUTE grants from the sandbox's mount table, brokered runs the command server. A
 * record of another level is refused here, never half applied.
 *
 * Statically linked, as the command client: it needs no loader or library inside. Any
 * failure is one line on stderr and a status (core/errors.py): 64 for a record the
 * launcher would not have written, 69 for what the kernel refuses.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_USAGE 64
#define EXIT_UNAVAILABLE 69
#define LIMIT (1u << 20)         /* spec.LIMIT: the encoded record */
#define ANSWER_LIMIT (1u << 16)  /* prochide.ANSWER_LIMIT: the helper's answer */
#define STATUS_LIMIT 65536       /* a /proc/PID/status, read whole */

#ifndef SYS_landlock_create_ruleset /* the same numbers on every architecture */
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_restrict_self 446
#endif
#define LANDLOCK_CREATE_RULESET_VERSION 1u
#define SCOPE_ABSTRACT_UNIX_SOCKET 1u
#define SCOPE_SIGNAL 2u
#define SCOPE_ABI 6 /* the first ABI with `scoped` */

/* spec.FIELDS, in their order: the record is these, each as its name, the count of its
 * values, then the values (tests/kernel/test_enter_stage.py compares the two lists). */
enum { LEVEL, MAX_PIDS, MAX_MEMORY, WRITABLE, EXEC_FILES, KEEP_IGNORED, LATE_MASKS,
       COMMAND, COMMANDS_ONLY, SHELLS, AGENT_WRITABLE, AGENT_EXEC, AGENT_CONNECT,
       AGENT_BIND, OFFLINE_COMMANDS, HELPER_FD, NFIELDS };
static const char *const FIELDS[NFIELDS] = {
    "level", "max_pids", "max_memory", "writable", "exec_files", "keep_ignored",
    "late_masks", "command", "commands_only", "shells", "agent_writable", "agent_exec",
    "agent_connect", "agent_bind", "offline_commands", "helper_fd"};
static const char *const LEVELS[] = {"standard", "harsh", "brokered"};
/* spec.TERMINAL_SIGNALS */
static const struct { const char *name; int signum; } TERMINAL[] = {
    {"int", SIGINT}, {"quit", SIGQUIT}, {"hup", SIGHUP}, {"term", SIGTERM}};
#define NTERMINAL (sizeof TERMINAL / sizeof TERMINAL[0])

struct field { char **values; size_t count; };

static _Noreturn void die(int status, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static _Noreturn void die(int status, const char *format, ...) {
    char line[512];
    va_list args;
    va_start(args, format);
    vsnprintf(line, sizeof line, format, args);
    va_end(args);
    dprintf(2, "claude-sandbox: %s\n", line);
    _exit(status);
}

static _Noreturn void malformed(const char *what, const char *name) {
    die(EXIT_USAGE, "_enter: the launcher's plan is malformed: %s%s", what, name ? name : "");
}

static void warn(const char *message) { dprintf(2, "claude-sandbox: warning: %s\n", message); }

/* spec._count / spec._int's test: ASCII digits only, at least one, at most `digits`. */
static int is_number(const char *text, size_t digits) {
    size_t length = strlen(text);
    if (length == 0 || length > digits) return 0;
    for (size_t i = 0; i < length; i++)
        if (text[i] < '0' || text[i] > '9') return 0;
    return 1;
}

/* spec._int: none, or one non-negative integer that setrlimit takes (at most 2^63-1). */
static int to_int(const struct field *f, const char *name, uint64_t *out) {
    if (f->count == 0) return 0;
    /* 19 digits at most: below 2^64, so strtoull cannot overflow before the bound. */
    if (f->count != 1 || !is_number(f->values[0], 19)
        || (*out = strtoull(f->values[0], NULL, 10)) > (uint64_t)INT64_MAX)
        malformed(name, " must be a non-negative integer");
    return 1;
}

static void absolute_paths(const struct field *f, const char *name) {
    for (size_t i = 0; i < f->count; i++)
        if (f->values[i][0] != '/') malformed(name, " must be absolute paths");
}

static void ports(const struct field *f, const char *name) {
    for (size_t i = 0; i < f->count; i++) {
        struct field one = {&f->values[i], 1};
        uint64_t port = 0;
        to_int(&one, name, &port);
        if (port == 0 || port > 65535) malformed(name, " must be TCP ports");
    }
}

static int flag(const struct field *f, const char *name) {
    if (f->count != 1 || (strcmp(f->values[0], "0") && strcmp(f->values[0], "1")))
        malformed(name, " must be 0 or 1");
    return f->values[0][0] == '1';
}

static char *read_record(int fd, size_t *size) {
    char *data = malloc(LIMIT + 1);
    size_t used = 0;
    if (!data) die(EXIT_UNAVAILABLE, "_enter: out of memory");
    for (;;) {
        ssize_t got = read(fd, data + used, LIMIT + 1 - used);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            die(EXIT_USAGE, "_enter: the launcher's plan is malformed: descriptor %d cannot "
                "be read (%s)", fd, strerror(errno));
        if (got == 0 || (used += (size_t)got) > LIMIT) break;
    }
    close(fd);
    if (used > LIMIT) malformed("too long, or cut short", NULL);
    *size = used;
    return data;
}

/* Split the record into its fields, checking each as spec.decode does, in its order. */
static void decode(char *data, size_t size, struct field fields[NFIELDS]) {
    if (size > 0 && data[size - 1] != '\0') malformed("too long, or cut short", NULL);
    size_t ntokens = 0;
    for (size_t i = 0; i < size; i++) ntokens += data[i] == '\0';
    char **tokens = calloc(ntokens + 1, sizeof *tokens);
    if (!tokens) die(EXIT_UNAVAILABLE, "_enter: out of memory");
    for (size_t i = 0, at = 0; at < ntokens; at++) {
        tokens[at] = data + i;
        i += strlen(data + i) + 1;
    }
    size_t at = 0;
    for (int n = 0; n < NFIELDS; n++) {
        if (at >= ntokens || strcmp(tokens[at], FIELDS[n]) || at + 1 >= ntokens)
            malformed("expected the field ", FIELDS[n]);
        const char *count = tokens[at + 1];
        size_t left = ntokens - at - 2;
        if (!is_number(count, 7) || strtoul(count, NULL, 10) > left)
            malformed("a count is not a number of values that follow", NULL);
        fields[n].count = strtoul(count, NULL, 10);
        fields[n].values = tokens + at + 2;
        at += 2 + fields[n].count;
    }
    if (at != ntokens) malformed("unexpected fields after the record", NULL);
}

/* The checks of spec.decode after the split, in its order; then this stage's own. */
static void check(struct field f[NFIELDS], uint64_t *pids, int *has_pids, uint64_t *memory,
                  int *has_memory, int *helper) {
    int known = 0;
    if (f[LEVEL].count == 1)
        for (size_t i = 0; i < sizeof LEVELS / sizeof LEVELS[0]; i++)
            known |= !strcmp(f[LEVEL].values[0], LEVELS[i]);
    if (!known) malformed("unknown level", NULL);
    for (size_t i = 0; i < f[KEEP_IGNORED].count; i++) {
        int terminal = 0;
        for (size_t t = 0; t < NTERMINAL; t++)
            terminal |= !strcmp(f[KEEP_IGNORED].values[i], TERMINAL[t].name);
        if (!terminal) malformed("keep_ignored must name terminal signals", NULL);
    }
    int late = flag(&f[LATE_MASKS], "late_masks");
    int offline = flag(&f[OFFLINE_COMMANDS], "offline_commands");
    if (f[COMMAND].count == 0 || f[COMMAND].values[0][0] != '/')
        malformed("the agent must be named by absolute path", NULL);
    *has_pids = to_int(&f[MAX_PIDS], "max_pids", pids);
    *has_memory = to_int(&f[MAX_MEMORY], "max_memory", memory);
    static const int path_fields[] = {WRITABLE, EXEC_FILES, COMMANDS_ONLY, SHELLS,
                                      AGENT_WRITABLE, AGENT_EXEC};
    for (size_t i = 0; i < sizeof path_fields / sizeof path_fields[0]; i++)
        absolute_paths(&f[path_fields[i]], FIELDS[path_fields[i]]);
    ports(&f[AGENT_CONNECT], "agent_connect");
    ports(&f[AGENT_BIND], "agent_bind");
    int brokered = !strcmp(f[LEVEL].values[0], "brokered");
    if (brokered != (f[SHELLS].count && f[AGENT_EXEC].count) || (offline && !brokered))
        malformed("the brokered fields belong to the brokered level, and it needs them",
                  NULL);
    uint64_t fd = 0;
    int has_fd = to_int(&f[HELPER_FD], "helper_fd", &fd);
    if (has_fd && fd < 3) malformed("helper_fd must not be a standard stream", NULL);
    if (late != has_fd) malformed("late_masks and helper_fd disagree", NULL);
    /* The record is well formed; this stage runs one level of it. */
    if (strcmp(f[LEVEL].values[0], "standard"))
        die(EXIT_USAGE, "_enter: the compiled inner stage runs hardening = standard only, "
            "not %s", f[LEVEL].values[0]);
    if (has_fd && fd > INT32_MAX)
        die(EXIT_UNAVAILABLE, "_enter: the late masks could not be made: the launcher's "
            "helper is gone (descriptor %llu)", (unsigned long long)fd);
    *helper = has_fd ? (int)fd : -1;
}

/* prochide.request_hiding: "mask" with this process's credentials, then "ok" or why not. */
static void request_hiding(int sock) {
    static const char request[] = {0, 0, 0, 5, 'm', 'a', 's', 'k', 0};
    union { /* a control buffer aligned as a cmsghdr must be */
        char bytes[CMSG_SPACE(sizeof(struct ucred))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct iovec first = {(void *)request, 1};
    struct msghdr message = {.msg_iov = &first, .msg_iovlen = 1, .msg_control = control.bytes,
                             .msg_controllen = sizeof control.bytes};
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    struct ucred ids = {getpid(), getuid(), getgid()};
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_CREDENTIALS;
    header->cmsg_len = CMSG_LEN(sizeof ids);
    memcpy(CMSG_DATA(header), &ids, sizeof ids);
    const char *why = NULL;
    char gone[160], *answer = NULL;
    unsigned char head[4];
    size_t size = 0;
    if (sendmsg(sock, &message, MSG_NOSIGNAL) != 1
        || send(sock, request + 1, sizeof request - 1, MSG_NOSIGNAL) != sizeof request - 1) {
        snprintf(gone, sizeof gone, "the launcher's helper is gone (%s)", strerror(errno));
        why = gone;
    }
    for (size_t got = 0; !why && got < sizeof head;) {
        ssize_t n = recv(sock, head + got, sizeof head - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) why = n == 0 && got == 0 ? "no answer" : "the launcher's helper is gone";
        else got += (size_t)n;
    }
    if (!why) {
        size = (size_t)head[0] << 24 | (size_t)head[1] << 16 | (size_t)head[2] << 8 | head[3];
        answer = size <= ANSWER_LIMIT ? malloc(size + 1) : NULL;
        if (!answer) why = "the launcher's helper is gone (a message over its limit)";
    }
    for (size_t got = 0; !why && got < size;) {
        ssize_t n = recv(sock, answer + got, size - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) why = "the launcher's helper is gone (a message cut short)";
        else got += (size_t)n;
    }
    close(sock);
    if (!why && size == 0)
        why = "a malformed answer"; /* no fields at all */
    if (!why && answer[size - 1] != '\0')
        why = "the launcher's helper is gone (a message whose last field is not ended by NUL)";
    if (!why && !(size == 3 && !memcmp(answer, "ok", 3))) {
        /* The fields after the first, joined by spaces, as prochide says them. */
        size_t first = strlen(answer) + 1;
        for (size_t i = first; i + 1 < size; i++)
            if (answer[i] == '\0') answer[i] = ' ';
        why = first < size && answer[first] ? answer + first : "a malformed answer";
    }
    if (why) die(EXIT_UNAVAILABLE, "_enter: the late masks could not be made: %s", why);
    free(answer);
}

/* enter.reset_signals: what the launch itself inherited ignored stays so; the rest, and
 * SIGPIPE and SIGXFSZ, go back to their defaults. */
static void reset_signals(const struct field *keep) {
    signal(SIGPIPE, SIG_DFL);
    signal(SIGXFSZ, SIG_DFL);
    for (size_t t = 0; t < NTERMINAL; t++) {
        int kept = 0;
        for (size_t i = 0; i < keep->count; i++) kept |= !strcmp(keep->values[i], TERMINAL[t].name);
        if (!kept) signal(TERMINAL[t].signum, SIG_DFL);
    }
}

/* enter.apply_rlimits: soft = hard, which the agent, with no capability, cannot raise. */
static void apply_rlimits(int has_pids, uint64_t pids, int has_memory, uint64_t memory) {
    struct { int which; int wanted; uint64_t value; } caps[] = {
        {RLIMIT_CORE, 1, 0}, /* no core files: they would hold the agent's secrets */
        {RLIMIT_NPROC, has_pids, pids},
        {RLIMIT_DATA, has_memory, memory}};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        struct rlimit limit = {caps[i].value, caps[i].value};
        if (caps[i].wanted && setrlimit(caps[i].which, &limit) != 0)
            die(EXIT_UNAVAILABLE, "_enter: cannot set rlimit: %s", strerror(errno));
    }
}

/* A /proc/PID/status's Name and NSpid values, split off in place; NULL when absent. */
static void status_fields(char *text, char **name, char **pids) {
    *name = *pids = NULL;
    for (char *line = text; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        char *colon = strchr(line, ':'); /* within this line only */
        if (colon) {
            *colon = '\0';
            char *value = colon + 1;
            while (*value == ' ' || *value == '\t') value++;
            if (!strcmp(line, "Name")) *name = value;
            else if (!strcmp(line, "NSpid")) *pids = value;
        }
        line = end ? end + 1 : NULL;
    }
}

static int read_status(const char *pid, char *buffer, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%s/status", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t got = read(fd, buffer, size - 1);
    close(fd);
    if (got < 0) return -1;
    buffer[got] = '\0';
    return 0;
}

/* The count of fields in an NSpid value, and its last (the pid in the innermost). */
static size_t nspid(char *value, char **last) {
    size_t count = 0;
    *last = NULL;
    for (char *word = strtok(value, " \t"); word; word = strtok(NULL, " \t")) {
        count++;
        *last = word;
    }
    return count;
}

#define NAMES_SHOWN 5
#define NAME_LIMIT 64 /* a task's Name is at most 15 bytes (TASK_COMM_LEN) */

/* Keep `name` among the NAMES_SHOWN smallest distinct names seen, in order. */
static void keep_name(char shown[NAMES_SHOWN][NAME_LIMIT], size_t *count, const char *name) {
    size_t at = 0;
    while (at < *count && strcmp(shown[at], name) < 0) at++;
    if ((at < *count && !strcmp(shown[at], name)) || at == NAMES_SHOWN) return;
    size_t last = *count < NAMES_SHOWN ? (*count)++ : NAMES_SHOWN - 1;
    for (size_t i = last; i > at; i--) memcpy(shown[i], shown[i - 1], NAME_LIMIT);
    snprintf(shown[at], NAME_LIMIT, "%s", name);
}

/* enter._say_left_behind: one line naming what the agent started and left running, which
 * ends with the session (its pid namespace goes) and would otherwise end silently. */
static void say_left_behind(void) {
    static char buffer[STATUS_LIMIT];
    char own[24], *last, shown[NAMES_SHOWN][NAME_LIMIT];
    size_t count = 0, distinct = 0;
    snprintf(own, sizeof own, "%d", getpid());
    if (read_status("self", buffer, sizeof buffer) != 0) return;
    char *name, *value;
    status_fields(buffer, &name, &value);
    size_t depth = value ? nspid(value, &last) : 0;
    DIR *proc = opendir("/proc");
    if (!proc) return;
    for (struct dirent *entry; (entry = readdir(proc));) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
        if (read_status(entry->d_name, buffer, sizeof buffer) != 0) continue;
        status_fields(buffer, &name, &value);
        /* The sandbox's own pid namespace only, at this process's depth (where the outer
         * /proc is bound, outer processes sit higher), neither its pid 1 (bwrap's) nor
         * this process. */
        if (!value || nspid(value, &last) != depth || !last || !strcmp(last, "1")
            || !strcmp(last, own))
            continue;
        count++;
        keep_name(shown, &distinct, name ? name : "?");
    }
    closedir(proc);
    if (!count) return;
    char line[NAMES_SHOWN * (NAME_LIMIT + 2)] = "";
    for (size_t i = 0; i < distinct; i++) {
        size_t used = strlen(line);
        snprintf(line + used, sizeof line - used, "%s%s", i ? ", " : "", shown[i]);
    }
    dprintf(2, "claude-sandbox: %zu process(es) the agent left running end with the "
            "session (%s)\n", count, line);
}

static int still_stopped(pid_t pid) {
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t got = read(fd, text, sizeof text - 1);
    close(fd);
    if (got <= 0) return 0;
    text[got] = '\0';
    char *paren = strrchr(text, ')');
    return paren && paren[1] == ' ' && paren[2] == 'T' && paren[3] == ' ';
}

/* enter.relay_stops and process.pass_stop_on: stay as the agent's parent, outside its
 * Landlock domain, and pass its Ctrl-Z on to the whole job, which the agent's own
 * kill(0, SIGTSTP) cannot reach from inside its domain. A terminal's Ctrl-Z stops the
 * job by itself and leaves a SIGTSTP pending here (blocked): that tells the two apart. */
static _Noreturn void relay_stops(void) {
    sigset_t tstp, pending;
    sigemptyset(&tstp);
    sigaddset(&tstp, SIGTSTP);
    for (size_t t = 0; t < NTERMINAL; t++) signal(TERMINAL[t].signum, SIG_IGN);
    sigprocmask(SIG_BLOCK, &tstp, NULL);
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WUNTRACED);
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0) _exit(0);
        if (WIFSTOPPED(status)) {
            if (sigpending(&pending) == 0 && !sigismember(&pending, SIGTSTP)
                && still_stopped(pid))
                kill(0, SIGTSTP); /* reaches this parent too: pending, taken below */
            struct timespec now = {0, 0};
            sigtimedwait(&tstp, NULL, &now);
            continue;
        }
        say_left_behind();
        _exit(WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status));
    }
}

/* landlock.enter at the standard level: scope signals and abstract unix sockets to the
 * sandbox (ABI 6); a kernel without them is said once, never dropped quietly. */
static void enter_landlock(void) {
    struct { uint64_t handled_access_fs, handled_access_net, scoped; } attr = {
        0, 0, SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET};
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi <= 0) {
        warn("Landlock is unavailable: signals and abstract sockets are not scoped");
        return;
    }
    if (abi < SCOPE_ABI) {
        char line[96];
        snprintf(line, sizeof line, "Landlock ABI %ld < 6: signals and abstract sockets are "
                 "not scoped", abi);
        warn(line);
        return;
    }
    long ruleset = syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (ruleset < 0) die(EXIT_UNAVAILABLE, "Landlock: create_ruleset failed: %s", strerror(errno));
    /* restrict_self needs no_new_privs (bwrap sets it; asking again is free). */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        die(EXIT_UNAVAILABLE, "Landlock: prctl(PR_SET_NO_NEW_PRIVS) failed: %s", strerror(errno));
    if (syscall(SYS_landlock_restrict_self, (int)ruleset, 0) != 0)
        die(EXIT_UNAVAILABLE, "Landlock: restrict_self failed: %s", strerror(errno));
    close((int)ruleset);
}

int main(int argc, char **argv) {
    if (argc != 2 || !is_number(argv[1], 9))
        die(EXIT_USAGE, "_enter: expected one argument, the plan's descriptor");
    size_t size;
    char *data = read_record(atoi(argv[1]), &size);
    struct field fields[NFIELDS];
    uint64_t pids = 0, memory = 0;
    int has_pids, has_memory, helper;
    decode(data, size, fields);
    check(fields, &pids, &has_pids, &memory, &has_memory, &helper);
    if (helper >= 0) request_hiding(helper);
    reset_signals(&fields[KEEP_IGNORED]);
    apply_rlimits(has_pids, pids, has_memory, memory);
    if (isatty(0)) {
        pid_t child = fork();
        if (child < 0) die(EXIT_UNAVAILABLE, "_enter: cannot fork: %s", strerror(errno));
        if (child > 0) relay_stops();
    }
    enter_landlock();
    char **command = fields[COMMAND].values;
    command[fields[COMMAND].count] = NULL; /* the next token, or the array's spare end */
    execv(command[0], command);
    die(EXIT_UNAVAILABLE, "cannot run %s: %s", command[0], strerror(errno));
}
