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
 * FILE (rootcache.py writes it, root's own, 0600): the line "claude-sandbox dir-times 4
 * TOKEN", then for each directory its status-change time and its modification time as
 * the kernel keeps them (each: seconds, 8 bytes, signed; nanoseconds, 4 bytes; little
 * endian), followed by its absolute path, as bytes, and a NUL. A directory differs when
 * either time does: only the kernel sets the status-change time, where the owner may set
 * the modification time back, and a file system whose status-change time is not one
 * (a fixed value, a creation time) still keeps the other. TOKEN is the cache's own (a
 * random value both files hold). On stdout: TOKEN and a NUL, the count of records read
 * and a NUL, then each path whose times are no longer the ones written, or that is gone,
 * each followed by a NUL. Exit 0 only when every directory was read.
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
 * below it are read relative to it: their walk starts there (at most HUB_DEPTH stay
 * open along a path, the nearest ones). A name read that way is the same directory the
 * absolute path names unless, since the open, the one opened or a directory above it
 * was renamed, or a mount made or removed there: the race an absolute read has with
 * any change made after a time is read. A rename changes a cached parent's time, which
 * the next launch's read finds. Any failure (an open refused, a record out of the
 * walk's order) only falls back to the absolute path.
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
#define MAGIC "claude-sandbox dir-times 4 "
#define RECORD_HEAD 24 /* seconds and nanoseconds, twice */
#define TOKEN_LIMIT 64
#define THREADS 2
#define HUB_FROM 16   /* cached directories below one that make it worth a descriptor */
#define HUB_DEPTH 64  /* descriptors open along one path, at most */
#define NONE SIZE_MAX

struct when {
    int64_t seconds;
    uint32_t nanoseconds;
};

struct entry {
    struct when changed_at; /* the status-change time */
    struct when modified_at;
    const char *path;
    size_t length;
    size_t below; /* cached directories below this one */
    size_t above; /* the nearest cached directory above this one, or NONE */
    int changed;
};

/* The directories opened along the path being read, the nearest last. `partial`: some
 * large directory above the outermost is not open (at most HUB_DEPTH are). */
struct hubs {
    struct entry *entry[HUB_DEPTH];
    int fd[HUB_DEPTH];
    size_t depth;
    int partial;
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

/* A time as the file holds it; exits on nanoseconds past a second. */
static struct when read_when(const char *at) {
    uint64_t seconds = 0;
    uint32_t nanoseconds = 0;
    for (int i = 7; i >= 0; i--)
        seconds = (seconds << 8) | (unsigned char)at[i];
    for (int i = 11; i >= 8; i--)
        nanoseconds = (nanoseconds << 8) | (unsigned char)at[i];
    if (nanoseconds >= 1000000000u)
        fail(EXIT_DATAERR, "a record's nanoseconds are past a second");
    return (struct when){(int64_t)seconds, nanoseconds};
}

/* Whether `kept` is the time `now` the kernel gives: compared as it keeps it, with no
 * product that could overflow. */
static int same(struct when kept, struct timespec now) {
    return (int64_t)now.tv_sec == kept.seconds && (uint32_t)now.tv_nsec == kept.nanoseconds;
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
        struct when changed_at = read_when(data + at), modified_at = read_when(data + at + 12);
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
        entries[n++] = (struct entry){changed_at, modified_at, path, (size_t)(end - path), 0,
                                      NONE, 0};
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

/* How many cached directories lie below each one, and the nearest above it. The walk
 * writes a directory before those below it, so one pass with a stack of the open
 * ancestors finds them, each count handed to the one above as its directory leaves the
 * stack; in any other order (a subtree a refresh listed again is written after the rest)
 * some count low and some lack the one above, which costs time only. */
static void count_below(struct entry *entries, size_t count) {
    size_t *open = malloc((count + 1) * sizeof *open);
    if (open == NULL)
        return; /* then no directory is opened: every path is read whole */
    size_t depth = 0;
    for (size_t i = 0; i <= count; i++) {
        while (depth > 0 && (i == count || !lies_below(&entries[i], &entries[open[depth - 1]]))) {
            depth--;
            if (depth > 0)
                entries[open[depth - 1]].below += entries[open[depth]].below + 1;
        }
        if (i == count)
            break;
        entries[i].above = depth > 0 ? open[depth - 1] : NONE;
        open[depth++] = i;
    }
    free(open);
}

/* Where `entry` is read from: the nearest opened directory above it, or its path. */
static const char *name_from(const struct hubs *hubs, const struct entry *entry, int *at) {
    if (hubs->depth == 0) {
        *at = AT_FDCWD;
        return entry->path;
    }
    const struct entry *hub = hubs->entry[hubs->depth - 1];
    *at = hubs->fd[hubs->depth - 1];
    return entry->path + (hub->length == 1 ? 1 : hub->length + 1);
}

/* Open `entry` (without following a link) for those below it to be read from. */
static void open_hub(struct hubs *hubs, struct entry *entry) {
    int at;
    const char *name = name_from(hubs, entry, &at);
    int fd = openat(at, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    if (hubs->depth == HUB_DEPTH) {
        /* The outermost gives way: a read always starts from its nearest opened
         * ancestor, however deep a chain of directories others made (each read would
         * otherwise walk all of it again). */
        close(hubs->fd[0]);
        memmove(hubs->entry, hubs->entry + 1, (HUB_DEPTH - 1) * sizeof *hubs->entry);
        memmove(hubs->fd, hubs->fd + 1, (HUB_DEPTH - 1) * sizeof *hubs->fd);
        hubs->depth--;
        hubs->partial = 1;
    }
    hubs->entry[hubs->depth] = entry;
    hubs->fd[hubs->depth++] = fd;
}

/* Open the large directories above `entry`, the nearest HUB_DEPTH, outermost first: a
 * run that begins deep in a tree, or climbs back out of a chain deeper than the open
 * ones, then reads from its nearest again. */
static void open_above(struct hubs *hubs, struct entry *entries, const struct entry *entry) {
    size_t line[HUB_DEPTH], n = 0;
    size_t a = entry->above;
    for (; a != NONE && n < HUB_DEPTH; a = entries[a].above)
        if (entries[a].below >= HUB_FROM)
            line[n++] = a;
    while (n > 0)
        open_hub(hubs, &entries[line[--n]]);
    for (; a != NONE; a = entries[a].above)
        if (entries[a].below >= HUB_FROM) {
            hubs->partial = 1;
            break;
        }
}

/* The entries from `first` to `end`: whether each time is still the one written. */
static void *read_share(void *argument) {
    struct share *share = argument;
    struct entry *entries = share->entries;
    struct hubs hubs = {.depth = 0, .partial = 1};
    struct stat info;
    for (size_t i = share->first; i < share->end; i++) {
        struct entry *entry = &entries[i];
        while (hubs.depth > 0 && !lies_below(entry, hubs.entry[hubs.depth - 1]))
            close(hubs.fd[--hubs.depth]);
        if (hubs.depth == 0 && hubs.partial) {
            hubs.partial = 0;
            open_above(&hubs, entries, entry);
        }
        int at;
        const char *name = name_from(&hubs, entry, &at);
        /* Gone, or no longer reachable: changed too (the walk then drops it). */
        entry->changed = fstatat(at, name, &info, AT_SYMLINK_NOFOLLOW) != 0
            || !same(entry->changed_at, info.st_ctim) || !same(entry->modified_at, info.st_mtim);
        if (entry->below >= HUB_FROM)
            open_hub(&hubs, entry);
    }
    while (hubs.depth > 0)
        close(hubs.fd[--hubs.depth]);
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
     * serve the ones after them; below 1024 directories, one reads them all. */
    size_t runs = count >= 1024 ? THREADS : 1;
    struct share shares[THREADS];
    pthread_t threads[THREADS];
    int started[THREADS] = {0};
    for (int t = 0; t < THREADS; t++) {
        size_t run = (size_t)t;
        shares[t] = run < runs ? (struct share){entries, count * run / runs,
                                                count * (run + 1) / runs}
                               : (struct share){entries, count, count}; /* nothing */
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
