/* The command client of the process-tree proof of concept (tests/kernel/tree_poc.py).
 *
 *   tree_client -c COMMAND
 *
 * Sends COMMAND, with its own descriptors 0, 1 and 2 (SCM_RIGHTS), over the socket
 * whose number is in TREE_FD to the command server, and exits with the status the
 * server sends back. It runs nothing itself: the one program an orchestrator under the
 * tree's Landlock domain may execute. Statically linked, so no loader or library is
 * needed beside it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3 || strcmp(argv[1], "-c") != 0) {
        fprintf(stderr, "usage: tree_client -c COMMAND\n");
        return 64;
    }
    const char *env = getenv("TREE_FD");
    if (env == NULL) {
        fprintf(stderr, "tree_client: TREE_FD is not set\n");
        return 69;
    }
    int sock = atoi(env);
    struct iovec iov = {.iov_base = argv[2], .iov_len = strlen(argv[2])};
    int fds[3] = {0, 1, 2};
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = control, .msg_controllen = sizeof control};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    if (sendmsg(sock, &msg, 0) < 0) {
        fprintf(stderr, "tree_client: cannot reach the server: %s\n", strerror(errno));
        return 69;
    }
    unsigned char status;
    if (read(sock, &status, 1) != 1) {
        fprintf(stderr, "tree_client: the server gave no status\n");
        return 69;
    }
    return status;
}
