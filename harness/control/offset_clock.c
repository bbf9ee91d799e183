/*
 * offset_clock: an LD_PRELOAD library that moves a process's wall clock by an offset a
 * file holds, and nothing else: CLOCK_REALTIME (and its coarse and TAI kinds),
 * gettimeofday and time read the real clock plus the offset; CLOCK_MONOTONIC and
 * CLOCK_BOOTTIME, which timers and timeouts use, are left alone, as a step of the
 * system clock leaves them.
 *
 * KCHAOS_CLOCK_FILE names the file: one integer, the offset in milliseconds (absent or
 * unreadable: 0). It is read again when the cached value is older than 50 ms of real
 * time, so a nemesis that rewrites it moves the clock within that.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define REREAD_NS 50000000LL

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static _Atomic int64_t offset_ns;
static _Atomic int64_t read_at_ns;

static clock_gettime_fn real_clock_gettime(void) {
    static _Atomic(clock_gettime_fn) real;
    clock_gettime_fn found = atomic_load(&real);
    if (found == NULL) {
        found = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        atomic_store(&real, found);
    }
    return found;
}

static int64_t read_offset_ns(void) {
    const char *path = getenv("KCHAOS_CLOCK_FILE");
    if (path == NULL) {
        return 0;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    char text[32];
    ssize_t got = read(fd, text, sizeof text - 1);
    close(fd);
    if (got <= 0) {
        return 0;
    }
    text[got] = '\0';
    return strtoll(text, NULL, 10) * 1000000LL;
}

/* The offset now, given the real wall clock now (ns). */
static int64_t current_offset(int64_t real_now_ns) {
    int64_t last = atomic_load(&read_at_ns);
    if (real_now_ns - last > REREAD_NS || real_now_ns < last) {
        atomic_store(&offset_ns, read_offset_ns());
        atomic_store(&read_at_ns, real_now_ns);
    }
    return atomic_load(&offset_ns);
}

static int64_t to_ns(const struct timespec *ts) {
    return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

static void from_ns(int64_t ns, struct timespec *ts) {
    ts->tv_sec = (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000L;
        ts->tv_sec -= 1;
    }
}

static int is_wall_clock(clockid_t clock) {
    return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE || clock == CLOCK_TAI;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    clock_gettime_fn real = real_clock_gettime();
    int result = real(clock, ts);
    if (result == 0 && is_wall_clock(clock)) {
        int64_t now = to_ns(ts);
        from_ns(now + current_offset(now), ts);
    }
    return result;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int result = clock_gettime(CLOCK_REALTIME, &ts);
    if (result == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return result;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
