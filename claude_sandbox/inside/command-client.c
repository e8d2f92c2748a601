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
 * The wire form (inside/broker.py reads it): a 4-byte little-endian length, then that
 * many bytes of NUL-terminated fields: "1", the path the shell was executed as
 * (AT_EXECFN: the server runs the real shell behind it), the working directory, the
 * count of arguments, the arguments, then the environment. The descriptors ride on the first
 * message (SCM_RIGHTS). Afterwards each byte the client sends is a signal to pass on;
 * the server answers with 4 bytes: the exit status, or 256 + the signal that ended it.
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
    unsigned char byte = (unsigned char)signum;
    int saved = errno;
    (void)!write(server, &byte, 1); /* async-signal-safe; a lost byte ends nothing */
    errno = saved;
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
    for (int i = 0; i < 4; i++) request[i] = (char)(length >> (8 * i));

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

    /* What a timeout, Esc or Ctrl-C sends the client is meant for the command. */
    struct sigaction relay = {.sa_handler = pass_on, .sa_flags = SA_RESTART};
    sigemptyset(&relay.sa_mask);
    int relayed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};
    for (size_t i = 0; i < sizeof relayed / sizeof *relayed; i++)
        sigaction(relayed[i], &relay, NULL);
    signal(SIGPIPE, SIG_IGN);

    unsigned char status[4];
    size_t got = 0;
    while (got < sizeof status) {
        ssize_t n = read(server, status + got, sizeof status - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            dprintf(2, "claude-sandbox: command server: no exit status came back\n");
            return EXIT_CANNOT;
        }
        got += (size_t)n;
    }
    uint32_t code = status[0] | status[1] << 8 | status[2] << 16 | (uint32_t)status[3] << 24;
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
