/*
 * The trace recorder (CUCACHE_TRACE=FILE): every application-level
 * allocation, free, synchronisation, stream and capture event, in the
 * format of stats/trace.h (docs/trace-format.md).
 *
 * Each thread fills a buffer of its own (no lock, no atomic read-modify-
 * write on the recording path): a chunk header followed by up to
 * TBUF_RECORDS records, appended to the file with one write(2) when full,
 * when the thread exits (a pthread key destructor) and at process exit
 * (atexit, every buffer still registered).  The file is opened O_APPEND,
 * so whole chunks of different threads never mix.  A record's time is the
 * TSC on x86-64 when the CPU says it is invariant (constant_tsc and
 * nonstop_tsc), else CLOCK_MONOTONIC nanoseconds; every chunk header pairs
 * the clock with CLOCK_MONOTONIC, for the reader's conversion.
 *
 * Frees are stamped before the allocator takes the block back, allocations
 * after it handed one out (the hook wrappers do that), so that a reader's
 * time order never puts the reuse of a block before its free.
 *
 * Limits: records a thread makes while the process is exiting may be lost;
 * a fork child records nothing unless the name has %p (it then starts a
 * file of its own).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "conf.h" /* conf_show */
#include "env.h"
#include "hook.h"
#include "hostalloc.h"
#include "log.h"
#include "recorder.h"
#include "st.h"
#include "trace.h"

enum { TBUF_RECORDS = 1024 }; /* 40 KiB per thread */

typedef struct tbuf_s {
    struct tbuf_s *prev, *next; /* the list of all live buffers (bufs) */
    _Atomic uint32_t n;         /* records filled (release: the exit flush reads it) */
    /* what one write(2) appends: the chunk header, then the records */
    trace_chunk_t chunk;
    trace_rec_t rec[TBUF_RECORDS];
} tbuf_t;

atomic_bool hook_tracing;

static struct {
    char tmpl[4096];
    int fd;
    bool tsc;
    atomic_uint next_tid;
    pthread_key_t key;
    pthread_mutex_t lock; /* the list of buffers, and writes at exit */
    tbuf_t *bufs;
    atomic_ulong write_errors;
} tr = {.fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER};

static HOOK_TLS tbuf_t *tls_buf;
static HOOK_TLS uint32_t tls_tid;

/* ------------------------------------------------------------------------
 * Clocks
 * ---------------------------------------------------------------------- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t ticks(void)
{
#if defined(__x86_64__)
    if (HOOK_LIKELY(tr.tsc))
        return __builtin_ia32_rdtsc();
#endif
    return mono_ns();
}

/* The CPU's flags say the TSC runs at a constant rate in every state. */
static bool tsc_invariant(void)
{
#if defined(__x86_64__)
    int fd = open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[16384];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof buf - 1 && (k = read(fd, buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)k;
    close(fd);
    buf[n] = '\0';
    char *flags = strstr(buf, "\nflags"); /* the first CPU's flags line */
    if (!flags)
        return false;
    char *end = strchr(flags + 1, '\n');
    if (end)
        *end = '\0';
    return strstr(flags, " constant_tsc") && strstr(flags, " nonstop_tsc");
#else
    return false;
#endif
}

/* ------------------------------------------------------------------------
 * The file
 * ---------------------------------------------------------------------- */

static void write_all(const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t k = write(tr.fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (atomic_fetch_add(&tr.write_errors, 1) == 0)
                hook_log("trace: writing to %s failed (%s); the trace is incomplete", tr.tmpl,
                         k < 0 ? strerror(errno) : "no progress");
            return;
        }
        p += k;
        len -= (size_t)k;
    }
}

/* Creates the file (never through a link) and writes its header. */
static int open_file(char *err, size_t errlen)
{
    char path[4096], why[384], shown[CONF_SHOW_BUF];
    if (st_expand_name(tr.tmpl, -1, 0, path, sizeof path, why, sizeof why) != 0) {
        snprintf(err, errlen, "CUCACHE_TRACE: %s", why);
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "CUCACHE_TRACE: cannot create '%s': %s%s", conf_show(shown, path, strlen(path)),
                 strerror(e), e == ELOOP ? " (a symbolic link is refused)" : "");
        return -1;
    }
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    trace_header_t h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, TRACE_MAGIC, sizeof h.magic);
    h.version = TRACE_VERSION;
    h.header_size = TRACE_HEADER_SIZE;
    h.chunk_size = TRACE_CHUNK_SIZE;
    h.rec_size = TRACE_REC_SIZE;
    h.start_ticks = ticks();
    h.start_ns = mono_ns();
    h.start_unix_ns = (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec;
    h.pid = (uint32_t)getpid();
    h.flags = tr.tsc ? TRACE_FLAG_TSC : 0;
    tr.fd = fd;
    write_all(&h, sizeof h);
    return 0;
}

/* Appends the buffer's records as one chunk and empties it. */
static void flush(tbuf_t *b)
{
    uint32_t n = atomic_load_explicit(&b->n, memory_order_acquire);
    if (n == 0 || tr.fd < 0)
        return;
    b->chunk.nrecords = n;
    b->chunk.ticks = ticks();
    b->chunk.ns = mono_ns();
    write_all(&b->chunk, sizeof b->chunk + (size_t)n * sizeof b->rec[0]);
    atomic_store_explicit(&b->n, 0, memory_order_release);
}

static void unregister(tbuf_t *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        tr.bufs = b->next;
    if (b->next)
        b->next->prev = b->prev;
}

/* A thread exits: its records go out, its buffer goes back. */
static void thread_done(void *arg)
{
    tbuf_t *b = arg;
    pthread_mutex_lock(&tr.lock);
    flush(b);
    unregister(b);
    pthread_mutex_unlock(&tr.lock);
    if (tls_buf == b)
        tls_buf = NULL;
    hostalloc_free(b);
}

static void at_exit(void)
{
    pthread_mutex_lock(&tr.lock);
    for (tbuf_t *b = tr.bufs; b; b = b->next)
        flush(b);
    pthread_mutex_unlock(&tr.lock);
}

/* The run's CUCACHE_CONF as TRACE_CONF pieces of 24 bytes (one empty piece
 * when unset), so that a replay knows the recorded settings. */
static void put_conf(void)
{
    const char *conf = hook_env()->conf;
    size_t len = conf ? strlen(conf) : 0, off = 0;
    do {
        unsigned char piece[24] = {0};
        size_t n = len - off < sizeof piece ? len - off : sizeof piece;
        if (n)
            memcpy(piece, conf + off, n);
        uint64_t w[3];
        for (int i = 0; i < 3; i++) {
            w[i] = 0;
            for (int k = 7; k >= 0; k--)
                w[i] = w[i] << 8 | piece[i * 8 + k]; /* little-endian, whatever the host */
        }
        bool last = off + n >= len;
        hook_trace_put_flags(TRACE_CONF, TRACE_API_NONE, -1, w[0], w[1], w[2], 0,
                             (uint32_t)off | (last ? TRACE_CONF_LAST : 0));
        off += n;
    } while (off < len);
}

/* Each opened device's memory as recorded, for a fork child's own file
 * (the child must not call CUDA to ask again). */
static uint64_t dev_free[HOOK_MAX_DEVICES], dev_total[HOOK_MAX_DEVICES];

/* A fork child's file starts as the parent's did: the settings, and the
 * devices the parent had opened, as they were then. */
static void put_conf_and_devices(void)
{
    put_conf();
    for (int d = 0; d < HOOK_MAX_DEVICES; d++)
        if (dev_total[d])
            hook_trace_put(TRACE_DEVICE, TRACE_API_NONE, d, 0, dev_free[d], dev_total[d], 0);
}

/* The fork child: the parent's unwritten records are the parent's. */
static void atfork_child(void)
{
    pthread_mutex_init(&tr.lock, NULL);
    for (tbuf_t *b = tr.bufs; b; b = b->next)
        atomic_store(&b->n, 0);
    if (tr.fd >= 0)
        close(tr.fd);
    tr.fd = -1;
    char err[512];
    if (!strstr(tr.tmpl, "%p") || open_file(err, sizeof err) != 0)
        atomic_store(&hook_tracing, false);
    else
        put_conf_and_devices();
}

int hook_trace_start(char *err, size_t errlen)
{
    const char *tmpl = hook_env()->trace;
    if (!tmpl)
        return 0;
    if (strlen(tmpl) >= sizeof tr.tmpl) {
        char shown[CONF_SHOW_BUF];
        snprintf(err, errlen, "CUCACHE_TRACE: '%s': the name is longer than %zu bytes",
                 conf_show(shown, tmpl, strlen(tmpl)), sizeof tr.tmpl - 1);
        return -1;
    }
    strcpy(tr.tmpl, tmpl);
    tr.tsc = tsc_invariant();
    if (pthread_key_create(&tr.key, thread_done) != 0) {
        snprintf(err, errlen, "CUCACHE_TRACE: no thread-specific key left");
        return -1;
    }
    if (open_file(err, errlen) != 0)
        return -1;
    atexit(at_exit);
    pthread_atfork(NULL, NULL, atfork_child);
    atomic_store(&hook_tracing, true);
    put_conf();
    return 0;
}

void hook_trace_device(int ordinal)
{
    if (!atomic_load_explicit(&hook_tracing, memory_order_relaxed) || (unsigned)ordinal >= HOOK_MAX_DEVICES)
        return;
    size_t free_bytes = 0, total = 0;
    if (hook_backend.mem_info(NULL, ordinal, &free_bytes, &total) != CORE_OK)
        return; /* the replay then has no recorded capacity for it */
    dev_free[ordinal] = free_bytes, dev_total[ordinal] = total;
    hook_trace_put(TRACE_DEVICE, TRACE_API_NONE, ordinal, 0, free_bytes, total, 0);
}

/* ------------------------------------------------------------------------
 * Recording
 * ---------------------------------------------------------------------- */

__attribute__((noinline)) static tbuf_t *buf_new(void)
{
    tbuf_t *b = hostalloc_malloc(sizeof *b);
    if (!b)
        return NULL;
    memset(b, 0, offsetof(tbuf_t, rec));
    if (!tls_tid)
        tls_tid = atomic_fetch_add(&tr.next_tid, 1) + 1;
    b->chunk.magic = TRACE_CHUNK_MAGIC;
    b->chunk.tid = tls_tid;
    pthread_mutex_lock(&tr.lock);
    b->next = tr.bufs;
    if (b->next)
        b->next->prev = b;
    tr.bufs = b;
    pthread_mutex_unlock(&tr.lock);
    pthread_setspecific(tr.key, b);
    tls_buf = b;
    return b;
}

uint64_t hook_trace_now(void)
{
    return ticks();
}

void hook_trace_put(unsigned kind, unsigned api, int device, uint64_t stream, uint64_t addr, uint64_t size,
                    uint64_t when)
{
    hook_trace_put_flags(kind, api, device, stream, addr, size, when, 0);
}

void hook_trace_put_flags(unsigned kind, unsigned api, int device, uint64_t stream, uint64_t addr, uint64_t size,
                          uint64_t when, uint32_t flags)
{
    tbuf_t *b = tls_buf;
    if (HOOK_UNLIKELY(!b) && !(b = buf_new()))
        return;
    uint32_t n = atomic_load_explicit(&b->n, memory_order_relaxed);
    b->rec[n] = (trace_rec_t){
        .kind = (uint8_t)kind,
        .api = (uint8_t)api,
        .device = (int16_t)device,
        .flags = flags,
        .ticks = when ? when : ticks(),
        .stream = stream,
        .addr = addr,
        .size = size,
    };
    atomic_store_explicit(&b->n, n + 1, memory_order_release);
    if (HOOK_UNLIKELY(n + 1 == TBUF_RECORDS)) {
        pthread_mutex_lock(&tr.lock);
        flush(b);
        pthread_mutex_unlock(&tr.lock);
    }
}
