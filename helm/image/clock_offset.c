/*
 * A wall clock set wrong from outside the process, for the node nemesis's `clock` fault
 * (nemesis/node.py). Preloaded into a source pod's processes (LD_PRELOAD), it adds the
 * seconds written in the file $FEDLAB_CLOCK_OFFSET_FILE to CLOCK_REALTIME as clock_gettime,
 * gettimeofday and time return it. The file is read again at most every 100 ms, so writing
 * another number makes the clock jump, back or forth. The monotonic clocks are left alone: sleeps,
 * timers and gRPC deadlines run as on a real machine whose wall clock is wrong.
 *
 * Why not libfaketime: Debian bookworm's (0.9.10), told to leave the monotonic clock alone
 * (FAKETIME_DONT_FAKE_MONOTONIC=1), fails every Python time.sleep with EINVAL, and when it moves
 * the monotonic clock too, a jump back stalls every timer by the jump.
 *
 *   gcc -O2 -shared -fPIC -o clock_offset.so clock_offset.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NS 1000000000LL
#define READ_EVERY_NS 100000000LL

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static _Atomic long long offset_ns;
static _Atomic long long next_read_ns;   /* monotonic time after which the file is read again */

static long long monotonic_ns(void) {
    struct timespec ts;
    real_clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * NS + ts.tv_nsec;
}

/* One thread reads the file when it is due; the others keep the offset they see. A file that is
 * missing or unreadable leaves the offset as it was. */
static void refresh_offset(void) {
    long long now = monotonic_ns(), due = atomic_load(&next_read_ns);
    if (now < due || !atomic_compare_exchange_strong(&next_read_ns, &due, now + READ_EVERY_NS))
        return;
    const char *path = getenv("FEDLAB_CLOCK_OFFSET_FILE");
    if (path == NULL)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char text[64];
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return;
    text[n] = '\0';
    char *end;
    double seconds = strtod(text, &end);
    if (end != text)
        atomic_store(&offset_ns, (long long)(seconds * 1e9));
}

static void shift(struct timespec *ts) {
    refresh_offset();
    long long t = ts->tv_sec * NS + ts->tv_nsec + atomic_load(&offset_ns);
    ts->tv_sec = t / NS;
    ts->tv_nsec = t % NS;
    if (ts->tv_nsec < 0) {
        ts->tv_sec -= 1;
        ts->tv_nsec += NS;
    }
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (real_clock_gettime == NULL)
        real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real_clock_gettime(clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE))
        shift(ts);
    return rc;
}

/* glibc's header says tv is never NULL, but glibc itself accepts NULL, and so does this. */
#pragma GCC diagnostic ignored "-Wnonnull-compare"
int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;   /* obsolete; glibc ignores it too */
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0 && tv != NULL) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
