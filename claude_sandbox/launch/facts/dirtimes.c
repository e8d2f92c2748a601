/* claude-sandbox's directory-time reader: which directories the root-only walk cached
 * have changed since it read them.
 *
 * A root launch reads the time of every directory the walk cached, tens of thousands on
 * a dev container's image, to find what root made or renamed since (launch/facts/
 * rootonly.py, docs/adr/0015-root-only-files-by-the-owners-modes.md). That is most of
 * what a root launch costs over a user's. The kernel's share of one lstat is the floor;
 * the interpreter added about as much again per directory, and loading the times into a
 * dict more. This program reads them from a flat file beside the cache and does nothing
 * else (docs/adr/0019-the-directory-times-in-c.md).
 *
 *   dirtimes FILE
 *
 * FILE (rootcache.py writes it, root's own, 0600): the line "claude-sandbox dir-times 1
 * TOKEN", then for each directory its modification time in nanoseconds (8 bytes, little
 * endian; -1: it was missing) followed by its absolute path and a NUL. TOKEN names the
 * cache the times belong to. On stdout: TOKEN and a NUL, then each path whose time is no
 * longer the one written (a missing path: not -1), each followed by a NUL. Exit 0 only
 * when every directory was read.
 *
 * The file is read only when it is a regular file of the caller's that no one else may
 * write, opened without following a link or waiting on a FIFO, as the cache itself is.
 * Anything else, and any record it would not have written, exits 65 with one line on
 * stderr: the caller then reads the times itself. Two threads read half each, as the
 * Python reader's two processes did. Statically linked, as the other programs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXIT_DATAERR 65
#define EXIT_UNAVAILABLE 69
#define FILE_LIMIT (256u << 20)
#define MAGIC "claude-sandbox dir-times 1 "
#define TOKEN_LIMIT 64
#define THREADS 2

struct entry {
    int64_t time;
    const char *path;
    int changed;
};

struct share {
    struct entry *entries;
    size_t count;
    size_t first;
};

static void fail(int status, const char *what) {
    fprintf(stderr, "dirtimes: %s\n", what);
    exit(status);
}

static char *read_own(const char *path, size_t *size) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        fail(EXIT_DATAERR, "the times file cannot be opened");
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) || info.st_uid != getuid()
            || (info.st_mode & 022) || info.st_size <= 0
            || (uint64_t)info.st_size > FILE_LIMIT)
        fail(EXIT_DATAERR, "the times file is not a regular file of the caller's, "
                           "writable by it alone");
    char *data = malloc((size_t)info.st_size + 1);
    if (data == NULL)
        fail(EXIT_UNAVAILABLE, "out of memory");
    size_t done = 0;
    while (done < (size_t)info.st_size) {
        ssize_t got = read(fd, data + done, (size_t)info.st_size - done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            fail(EXIT_DATAERR, "the times file could not be read whole");
        done += (size_t)got;
    }
    close(fd);
    data[done] = '\0';
    *size = done;
    return data;
}

/* The records after the first line; exits on anything the writer would not write. */
static struct entry *parse(char *data, size_t size, size_t at, size_t *count) {
    size_t room = 1024, n = 0;
    struct entry *entries = malloc(room * sizeof *entries);
    if (entries == NULL)
        fail(EXIT_UNAVAILABLE, "out of memory");
    while (at < size) {
        if (size - at < 8 + 2)
            fail(EXIT_DATAERR, "a record is cut short");
        uint64_t bits = 0;
        for (int i = 7; i >= 0; i--)
            bits = (bits << 8) | (unsigned char)data[at + (size_t)i];
        at += 8;
        char *path = data + at;
        char *end = memchr(path, '\0', size - at);
        if (end == NULL || path[0] != '/')
            fail(EXIT_DATAERR, "a record's path is not absolute and NUL-terminated");
        if (n == room) {
            room *= 2;
            struct entry *more = realloc(entries, room * sizeof *entries);
            if (more == NULL)
                fail(EXIT_UNAVAILABLE, "out of memory");
            entries = more;
        }
        entries[n++] = (struct entry){(int64_t)bits, path, 0};
        at = (size_t)(end - data) + 1;
    }
    *count = n;
    return entries;
}

/* Every THREADS-th entry from `first`: whether its time is still the one written. */
static void *read_share(void *argument) {
    struct share *share = argument;
    struct stat info;
    for (size_t i = share->first; i < share->count; i += THREADS) {
        struct entry *entry = &share->entries[i];
        if (lstat(entry->path, &info) != 0)
            entry->changed = entry->time != -1;  /* gone, or no longer reachable */
        else
            entry->changed = (int64_t)info.st_mtim.tv_sec * 1000000000
                + info.st_mtim.tv_nsec != entry->time;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2)
        fail(EXIT_DATAERR, "usage: dirtimes FILE");
    size_t size;
    char *data = read_own(argv[1], &size);
    size_t magic = strlen(MAGIC);
    char *newline = memchr(data, '\n', size < magic + TOKEN_LIMIT ? size : magic + TOKEN_LIMIT);
    if (size < magic || memcmp(data, MAGIC, magic) != 0 || newline == NULL
            || newline == data + magic)
        fail(EXIT_DATAERR, "the times file has no header of ours");
    for (char *c = data + magic; c < newline; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f') || *c == '-'))
            fail(EXIT_DATAERR, "the times file's token is not ours");
    size_t count;
    struct entry *entries = parse(data, size, (size_t)(newline - data) + 1, &count);

    struct share shares[THREADS];
    pthread_t threads[THREADS];
    int started[THREADS] = {0};
    for (int t = 0; t < THREADS; t++) {
        shares[t] = (struct share){entries, count, (size_t)t};
        /* The first share is read here; a thread that cannot start leaves its share to
         * this one too: no directory goes unread. */
        if (t > 0 && count >= 1024)
            started[t] = pthread_create(&threads[t], NULL, read_share, &shares[t]) == 0;
    }
    for (int t = 0; t < THREADS; t++)
        if (!started[t])
            read_share(&shares[t]);
    for (int t = 0; t < THREADS; t++)
        if (started[t] && pthread_join(threads[t], NULL) != 0)
            fail(EXIT_UNAVAILABLE, "a reading thread was lost");

    *newline = '\0';
    if (fputs(data + magic, stdout) == EOF || putchar('\0') == EOF)
        fail(EXIT_UNAVAILABLE, "the answer could not be written");
    for (size_t i = 0; i < count; i++)
        if (entries[i].changed && (fputs(entries[i].path, stdout) == EOF
                                   || putchar('\0') == EOF))
            fail(EXIT_UNAVAILABLE, "the answer could not be written");
    if (fflush(stdout) != 0)
        fail(EXIT_UNAVAILABLE, "the answer could not be written");
    return 0;
}
