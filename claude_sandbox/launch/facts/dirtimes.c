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
 *   dirtimes FILE PARENT
 *
 * FILE (rootcache.py writes it, root's own, 0600): the line "claude-sandbox dir-times 2
 * TOKEN", then for each directory its modification time as the kernel keeps it (seconds:
 * 8 bytes, signed; nanoseconds: 4 bytes; both little endian) followed by its absolute
 * path, as bytes, and a NUL. TOKEN is the cache's own (a random value both files hold).
 * On stdout: TOKEN and a NUL, the count of records read and a NUL, then each path whose
 * time is no longer the one written, or that is gone, each followed by a NUL. Exit 0
 * only when every directory was read.
 *
 * The file is read only when it is a regular file of the caller's that no one else may
 * write, opened without following a link or waiting on a FIFO, as the cache itself is.
 * Anything else, and any record that is not well formed (cut short, a path not
 * absolute, nanoseconds past a second), exits 65 with one line on stderr: the caller
 * then reads the times itself. From 1024 directories on, two threads read half each.
 *
 * Most of a read is the kernel's walk of each path, component by component (a cached
 * directory is nine deep on average). A directory that has at least HUB_FROM cached
 * directories below it is opened (O_PATH, no link followed) as it is read, and those
 * below it are read relative to it: their walk starts there. A name read that way is
 * the same directory the absolute path names, unless the one opened was renamed away
 * since; a rename changes its parent's time, which this read or the next finds, as
 * with any change made after a time is read. Any failure (an open refused, a record
 * out of the walk's order) only falls back to the absolute path.
 * PARENT is the caller's pid: the program ends with it (a parent-death signal of its
 * own, since an exec that raises root's capabilities clears the one it inherited).
 * Statically linked, as the other programs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXIT_DATAERR 65
#define EXIT_UNAVAILABLE 69
#define FILE_LIMIT (256u << 20)
#define MAGIC "claude-sandbox dir-times 2 "
#define RECORD_HEAD 12 /* seconds and nanoseconds */
#define TOKEN_LIMIT 64
#define THREADS 2
#define HUB_FROM 16   /* cached directories below one that make it worth a descriptor */
#define HUB_DEPTH 64  /* descriptors open along one path, at most */

struct entry {
    int64_t seconds;
    uint32_t nanoseconds;
    const char *path;
    size_t length;
    size_t below; /* cached directories below this one */
    int changed;
};

struct share {
    struct entry *entries;
    size_t first;
    size_t end;
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

/* The records after the first line; exits on any that is not well formed. */
static struct entry *parse(char *data, size_t size, size_t at, size_t *count) {
    size_t room = 1024, n = 0;
    struct entry *entries = malloc(room * sizeof *entries);
    if (entries == NULL)
        fail(EXIT_UNAVAILABLE, "out of memory");
    while (at < size) {
        if (size - at < RECORD_HEAD + 2)
            fail(EXIT_DATAERR, "a record is cut short");
        uint64_t seconds = 0;
        uint32_t nanoseconds = 0;
        for (int i = 7; i >= 0; i--)
            seconds = (seconds << 8) | (unsigned char)data[at + (size_t)i];
        for (int i = 11; i >= 8; i--)
            nanoseconds = (nanoseconds << 8) | (unsigned char)data[at + (size_t)i];
        if (nanoseconds >= 1000000000u)
            fail(EXIT_DATAERR, "a record's nanoseconds are past a second");
        at += RECORD_HEAD;
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
        entries[n++] = (struct entry){(int64_t)seconds, nanoseconds, path,
                                      (size_t)(end - path), 0, 0};
        at = (size_t)(end - data) + 1;
    }
    *count = n;
    return entries;
}

/* Whether `entry` lies below `top`, and so can be read relative to it. */
static int lies_below(const struct entry *entry, const struct entry *top) {
    if (top->length == 1) /* "/" */
        return entry->length > 1;
    return entry->length > top->length + 1 && entry->path[top->length] == '/'
        && memcmp(entry->path, top->path, top->length) == 0;
}

/* How many cached directories lie below each one. The walk writes a directory before
 * those below it, so one pass with a stack of the open ancestors counts them; in any
 * other order some count low, which costs time only. */
static void count_below(struct entry *entries, size_t count) {
    size_t *open = malloc((count + 1) * sizeof *open);
    if (open == NULL)
        return; /* then no directory is opened: every path is read whole */
    size_t depth = 0;
    for (size_t i = 0; i < count; i++) {
        while (depth > 0 && !lies_below(&entries[i], &entries[open[depth - 1]]))
            depth--;
        for (size_t d = 0; d < depth; d++)
            entries[open[d]].below++;
        open[depth++] = i;
    }
    free(open);
}

/* The entries from `first` to `end`: whether each time is still the one written. */
static void *read_share(void *argument) {
    struct share *share = argument;
    struct entry *hubs[HUB_DEPTH];
    int fds[HUB_DEPTH];
    size_t depth = 0;
    struct stat info;
    for (size_t i = share->first; i < share->end; i++) {
        struct entry *entry = &share->entries[i];
        while (depth > 0 && !lies_below(entry, hubs[depth - 1]))
            close(fds[--depth]);
        int at = AT_FDCWD;
        const char *name = entry->path;
        if (depth > 0) {
            const struct entry *hub = hubs[depth - 1];
            at = fds[depth - 1];
            name = entry->path + (hub->length == 1 ? 1 : hub->length + 1);
        }
        /* Compared as the kernel keeps it: no product that could overflow. Gone, or no
         * longer reachable: changed too (the walk then drops it). */
        entry->changed = fstatat(at, name, &info, AT_SYMLINK_NOFOLLOW) != 0
            || (int64_t)info.st_mtim.tv_sec != entry->seconds
            || (uint32_t)info.st_mtim.tv_nsec != entry->nanoseconds;
        if (entry->below >= HUB_FROM && depth < HUB_DEPTH) {
            int fd = openat(at, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd >= 0) {
                hubs[depth] = entry;
                fds[depth++] = fd;
            }
        }
    }
    while (depth > 0)
        close(fds[--depth]);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3)
        fail(EXIT_DATAERR, "usage: dirtimes FILE PARENT");
    char *end;
    long parent = strtol(argv[2], &end, 10);
    if (*argv[2] == '\0' || *end != '\0' || parent <= 1)
        fail(EXIT_DATAERR, "PARENT is not a pid");
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != (pid_t)parent)
        fail(EXIT_UNAVAILABLE, "the caller is gone");
    size_t size;
    char *data = read_own(argv[1], &size);
    size_t magic = strlen(MAGIC);
    char *newline = memchr(data, '\n', size < magic + TOKEN_LIMIT ? size : magic + TOKEN_LIMIT);
    if (size < magic || memcmp(data, MAGIC, magic) != 0 || newline == NULL
            || newline == data + magic)
        fail(EXIT_DATAERR, "the times file has no header of ours");
    for (char *c = data + magic; c < newline; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            fail(EXIT_DATAERR, "the times file's token is not ours");
    size_t count;
    struct entry *entries = parse(data, size, (size_t)(newline - data) + 1, &count);

    count_below(entries, count);

    /* Each thread reads a run of the walk's order, so that the directories it opens
     * serve the ones after them. */
    struct share shares[THREADS];
    pthread_t threads[THREADS];
    int started[THREADS] = {0};
    for (int t = 0; t < THREADS; t++) {
        shares[t] = (struct share){entries, count * (size_t)t / THREADS,
                                   count * (size_t)(t + 1) / THREADS};
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
    if (printf("%s%c%zu%c", data + magic, '\0', count, '\0') < 0)
        fail(EXIT_UNAVAILABLE, "the answer could not be written");
    for (size_t i = 0; i < count; i++)
        if (entries[i].changed && (fputs(entries[i].path, stdout) == EOF
                                   || putchar('\0') == EOF))
            fail(EXIT_UNAVAILABLE, "the answer could not be written");
    if (fflush(stdout) != 0)
        fail(EXIT_UNAVAILABLE, "the answer could not be written");
    return 0;
}
