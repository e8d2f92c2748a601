/* claude-sandbox's command client: the shells an agent sees under `hardening = brokered`.
 *
 * In that level the sandbox binds this program over /bin/sh, /bin/bash and the other
 * shells, and the agent's Landlock domain lets it execute nothing else of the system.
 * The client runs nothing itself. It sends its argv, its working directory, its
 * environment and its descriptors 0, 1 and 2 to the command server (inside/broker.py),
 * which runs the real shell with them in a fresh sandbox outside the agent's domain;
 * it passes on the signals it gets, and exits as the command did.
 *
 * Why C, statically linked (docs/adr/0009-the-enforced-process-tree.md): a client that is an
 * interpreter would let the agent run anything through it, and a static program
 * needs no loader or library the agent's domain would also have to let it execute.
 *
 * The wire form is claude_sandbox/core/wire.py's, as between all of our processes: a
 * message is a 4-byte big-endian length, then that many bytes of NUL-terminated fields,
 * the first naming its kind. The request: "1", the path the shell was executed as
 * (AT_EXECFN: the server runs the real shell behind it), the working directory, the
 * count of arguments, the arguments, then the environment; the descriptors ride on its
 * first byte (SCM_RIGHTS). Afterwards the client sends "signal", N for each signal to
 * pass on, and the server answers "status", N: the exit status, or 256 + the signal
 * that ended the command.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef BROKER_SOCKET /* claude_sandbox/core/paths.py names it; the installer passes it */
#error "build with -DBROKER_SOCKET=PATH (install/installer.py does)"
#endif
#define REQUEST_LIMIT (8u << 20) /* the server's limit too: ARG_MAX-sized scripts fit */
#define EXIT_CANNOT 126          /* what a shell returns for a command it cannot run */

extern char **environ;
static int server = -1;

static int fail(const char *what) {
    dprintf(2, "claude-sandbox: command server: %s: %s\n", what, strerror(errno));
    return EXIT_CANNOT;
}

static void pass_on(int signum) {
    /* "signal", N as one message, built without stdio: async-signal-safe. */
    char message[16] = {0, 0, 0, 0, 's', 'i', 'g', 'n', 'a', 'l', 0};
    size_t used = 11;
    if (signum >= 10) message[used++] = (char)('0' + signum / 10);
    message[used++] = (char)('0' + signum % 10);
    message[used++] = 0;
    message[3] = (char)(used - 4);
    int saved = errno;
    (void)!write(server, message, used); /* a lost message ends nothing */
    errno = saved;
}

/* Read exactly `size` bytes; 0 when the server is gone first. */
static int read_exactly(unsigned char *buf, size_t size) {
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(server, buf + got, size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0;
        got += (size_t)n;
    }
    return 1;
}

/* Append `text` and its NUL to the request; 0 when the limit is reached. */
static int add(char *buf, size_t *used, const char *text) {
    size_t n = strlen(text) + 1;
    if (n > REQUEST_LIMIT - *used) return 0;
    memcpy(buf + *used, text, n);
    *used += n;
    return 1;
}

int main(int argc, char **argv) {
    /* A closed 0, 1 or 2 would otherwise become the server's socket below, and the
     * command would get its own control connection as a stream. */
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd) return EXIT_CANNOT;
    char *request = malloc(REQUEST_LIMIT + 4);
    char cwd[4096], count[16];
    if (request == NULL) return fail("no memory");
    if (getcwd(cwd, sizeof cwd) == NULL) return fail("getcwd");
    size_t used = 4;
    snprintf(count, sizeof count, "%d", argc);
    const char *executed = (const char *)getauxval(AT_EXECFN);
    int fits = add(request, &used, "1") && add(request, &used, executed ? executed : "")
               && add(request, &used, cwd) && add(request, &used, count);
    for (int i = 0; fits && i < argc; i++) fits = add(request, &used, argv[i]);
    for (char **e = environ; fits && *e != NULL; e++) fits = add(request, &used, *e);
    if (!fits) {
        errno = E2BIG;
        return fail("the command and its environment");
    }
    uint32_t length = (uint32_t)(used - 4);
    for (int i = 0; i < 4; i++) request[i] = (char)(length >> (8 * (3 - i)));

    server = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (server < 0) return fail("socket");
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, BROKER_SOCKET, sizeof address.sun_path - 1);
    if (connect(server, (struct sockaddr *)&address, sizeof address) < 0)
        return fail("connect " BROKER_SOCKET);

    int fds[3] = {0, 1, 2};
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    struct iovec iov = {.iov_base = request, .iov_len = used};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = control, .msg_controllen = sizeof control};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    ssize_t sent = sendmsg(server, &msg, MSG_NOSIGNAL);
    if (sent < 0) return fail("send");
    for (size_t done = (size_t)sent; done < used; done += (size_t)sent) {
        sent = send(server, request + done, used - done, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) sent = 0;
        else if (sent < 0) return fail("send");
    }
    free(request);

    /* What a timeout, Esc or Ctrl-C sends the client is meant for the command; a server
     * gone must not end the client by SIGPIPE first. */
    signal(SIGPIPE, SIG_IGN);
    struct sigaction relay = {.sa_handler = pass_on, .sa_flags = SA_RESTART};
    sigemptyset(&relay.sa_mask);
    int relayed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};
    for (size_t i = 0; i < sizeof relayed / sizeof *relayed; i++)
        sigaction(relayed[i], &relay, NULL);

    /* The answer: "status", N; anything else is no answer. */
    unsigned char head[4], body[32];
    uint32_t size = 0, code = 0;
    int valid = read_exactly(head, sizeof head);
    if (valid) {
        size = (uint32_t)head[0] << 24 | head[1] << 16 | head[2] << 8 | head[3];
        valid = size >= 9 && size <= sizeof body && read_exactly(body, size)
                && memcmp(body, "status", 7) == 0 && body[size - 1] == 0;
    }
    for (uint32_t i = 7; valid && i < size - 1; i++) {
        valid = body[i] >= '0' && body[i] <= '9' && code < 100000;
        code = code * 10 + (uint32_t)(body[i] - '0');
    }
    if (!valid || code > 256 + 64) {
        dprintf(2, "claude-sandbox: command server: no exit status came back\n");
        return EXIT_CANNOT;
    }
    if (code >= 256) { /* end as the command ended: the caller reads a signal */
        int signum = (int)(code - 256);
        signal(signum, SIG_DFL);
        sigset_t only;
        sigemptyset(&only);
        sigaddset(&only, signum);
        sigprocmask(SIG_UNBLOCK, &only, NULL);
        raise(signum);
        return 128 + signum;
    }
    return (int)code;
}
