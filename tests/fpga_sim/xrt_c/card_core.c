/*
 * The simulated card's hot path: see card_core.h for what lives here and why.
 *
 * Behaviour, as XRT 2.17 (xocl, KDS + ERT) shows it to a host program, and as fpga_sim/card.py
 * documents it:
 *
 * DMA: one host-to-card and one card-to-host channel per card at FPGASERVE_SIM_PCIE_GBPS
 * (default 12 GB/s); a sync begins when its channel is free and the caller blocks until its
 * modelled end. In "inline" mode the bytes move (host copy <-> device memory, 0xA5 where the
 * card never wrote); in "timing" mode device memory is the host memory and nothing moves.
 *
 * Commands: a start is queued on one compute unit (of those allowed, the one free soonest) and
 * starts after the commands before it on that CU. At its start it reads device memory and is
 * computed (inline mode: the project's C-simulation, memoized on the last inputs); its outputs
 * land in device memory at completion, (latency + II_eff * (rows - 1)) / f_clk later. The state
 * is NEW until completion. A start hangs, forever, when the hardware would (lengths that do
 * not fit the kernel, a buffer outside the allocations or in a bank the CU's port does not
 * reach), when the CU hung before, or when the control folder asks (hang-card<N>[-<cu>],
 * consumed by the next start); what is queued behind a hung command never starts.
 *
 * Rendezvous: a start made while one is pending is held until N commands execute at once (or
 * its timeout passes: a fault, then it completes): proof that a host overlaps kernels.
 *
 * Nothing calls Python here; what the cold path must know (a hang's state, a log line, the
 * process now holding buffers or none) is queued under the lock and handed to the notify
 * callback after it is released.
 */
#define _GNU_SOURCE
#include "card_core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))
#define PAGE 4096u
#define MAX_FAULTS 20
#define DMA_LOG 256
#define BUSY_LOG 4096
#define MEMO_ENTRIES 4
#define MEMO_MAX_BYTES (256ull << 20)
#define FAAST_ROWS 16384
#define FAAST_OUT_BEATS 512
#define BEAT 64
#define SPIN_BELOW_S 30e-6
#define DMA_SLEEP_ABOVE_S 5e-6
#define STATE_CHECK_S 0.05
#define DEFAULT_PCIE_GBPS 12.0
#define DEFAULT_RENDEZVOUS_TIMEOUT_S 20.0
#define AP_START 0x1u
#define AP_DONE 0x2u
#define AP_IDLE 0x4u
#define AUTO_RESTART 0x80u

enum { S_QUEUED = 0, S_RUNNING = 1, S_HELD = 2, S_HUNG = 3, S_DONE = 4, S_ABORTED = 5 };

/* ------------------------------------------------------------------ errors */
static __thread char err_text[2048];

API const char *fpgasim_last_error(void)
{
    return err_text;
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_text, sizeof err_text, fmt, ap);
    va_end(ap);
    return -code;
}

static char *dup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dup_printf(const char *fmt, ...)
{
    char *out = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&out, fmt, ap) < 0)
        out = NULL;
    va_end(ap);
    return out;
}

/* ------------------------------------------------------------------ time */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct timespec abs_time(double t)
{
    struct timespec ts;
    if (!isfinite(t))
        t = now_s() + 1.0;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000L;
    }
    if (ts.tv_nsec < 0)
        ts.tv_nsec = 0;
    return ts;
}

/* ------------------------------------------------------------------ metering */
/* The card model's own CPU: thread CPU time from the outermost entry into the model (its own
 * API, or fpgasim_meter_enter by a stand-in wrapping it) to the matching exit; blocked: the
 * part spent sleeping for modelled time (a blocking call costs the system a context switch
 * each way, as a real runtime's ioctl or poll does). */
static __thread int meter_depth;
static __thread uint64_t meter_t0;
static uint64_t meter_total_ns, meter_blocked_ns, meter_calls;

API void fpgasim_meter_enter(void)
{
    if (meter_depth++ == 0)
        meter_t0 = thread_cpu_ns();
}

API void fpgasim_meter_leave(void)
{
    if (meter_depth > 0 && --meter_depth == 0) {
        __atomic_add_fetch(&meter_total_ns, thread_cpu_ns() - meter_t0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&meter_calls, 1, __ATOMIC_RELAXED);
    }
}

/* out: total CPU ns, of which blocked, outermost calls */
API void fpgasim_cpu(uint64_t out[3])
{
    out[0] = __atomic_load_n(&meter_total_ns, __ATOMIC_RELAXED);
    out[1] = __atomic_load_n(&meter_blocked_ns, __ATOMIC_RELAXED);
    out[2] = __atomic_load_n(&meter_calls, __ATOMIC_RELAXED);
}

/* Block until CLOCK_MONOTONIC reaches t; the last SPIN_BELOW_S spin (a sleep and its wake-up
 * cost more than that, and wake up late). */
static void sleep_until(double t)
{
    uint64_t c0 = thread_cpu_ns();
    for (;;) {
        double left = t - now_s();
        if (left <= 0)
            break;
        if (left < SPIN_BELOW_S) {
            while (now_s() < t) {
            }
            break;
        }
        struct timespec ts = abs_time(t - SPIN_BELOW_S * 0.5);
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
    __atomic_add_fetch(&meter_blocked_ns, thread_cpu_ns() - c0, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ the environment */
/* 0 (unset or empty) or the number; -ESIM when it is not a non-negative number. */
static int env_number(const char *name, double *out)
{
    const char *text = getenv(name);
    *out = 0.0;
    if (text == NULL)
        return 0;
    while (*text == ' ' || *text == '\t')
        text++;
    if (*text == '\0')
        return 0;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    while (*end == ' ' || *end == '\t' || *end == '\n')
        end++;
    if (end == text || *end != '\0' || errno == ERANGE)
        return fail(FPGASIM_ESIM, "%s must be a number, got '%s'", name, getenv(name));
    if (v < 0)
        return fail(FPGASIM_ESIM, "%s must not be negative, got '%s'", name, getenv(name));
    *out = v;
    return 0;
}

API int32_t fpgasim_pcie_rate(double *rate)
{
    double gbps;
    const char *text = getenv("FPGASERVE_SIM_PCIE_GBPS");
    int rc = env_number("FPGASERVE_SIM_PCIE_GBPS", &gbps);
    if (rc < 0)
        return fail(FPGASIM_ESIM, "FPGASERVE_SIM_PCIE_GBPS must be a number (GB/s), got '%s'", text);
    if (text != NULL && *text && gbps <= 0)
        return fail(FPGASIM_ESIM, "FPGASERVE_SIM_PCIE_GBPS must be positive, got '%s'", text);
    *rate = (gbps > 0 ? gbps : DEFAULT_PCIE_GBPS) * 1e9;
    return 0;
}

/* ------------------------------------------------------------------ objects */
struct call {
    int64_t rows;
    int nreads, nwrites;
    struct {
        int arg_id;
        const char *arg;
        uint64_t address, nbytes;
    } reads[1], writes[1];
    char *fault;
};

struct cmd {
    uint64_t id;
    int refs;     /* handles holding it (a run, a Python Command) */
    int in_queue; /* on its CU's queue (a queued, running, held or hung command) */
    int card, cu;
    unsigned char *regs;
    uint32_t nregs;
    double submit_t, est, start_t, end_t, natural_end, hold_deadline;
    int started, via_kds, state;
    char *hang_reason;
    struct call call;
    unsigned char *out[1];
    size_t out_len[1];
    int staged;
    uint32_t *state_word; /* an ERT packet's header, written at completion (PYNQ) */
    struct cmd *next;
};

struct cu {
    int index;
    char name[FPGASIM_NAME], kernel[FPGASIM_NAME];
    uint64_t base, span;
    uint64_t arg_banks[FPGASIM_MAX_ARGS];
    char arg_port[FPGASIM_MAX_ARGS][32];
    int model;         /* 0: none */
    char *model_error; /* why there is none */
    unsigned char *regs;
    struct cmd *head, *tail;
    uint64_t qlen;
    double last_end, busy_s;
    uint64_t commands, completed, rows;
    char *hung;
    int hung_elsewhere; /* the state file says it hung (in an earlier process) */
    int contexts;
    int done_latched, auto_restart;
};

struct memo_entry {
    int64_t rows;
    size_t in_len, out_len;
    unsigned char *in, *out;
};

struct model {
    struct fpgasim_model d;
    pthread_mutex_t serial;
    struct memo_entry memo[MEMO_ENTRIES];
    int nmemo;
    uint64_t hits, misses;
};

struct card {
    int present, mode, adopted, loaded, bad_state, clock_mhz;
    double chan_free[2];
    struct fpgasim_card_stats st;
    int ngroups, nmems, ncus;
    struct fpgasim_group groups[FPGASIM_MAX_GROUPS];
    char mem_tags[FPGASIM_MAX_MEMS][32];
    struct cu cus[FPGASIM_MAX_CUS];
    char *faults[MAX_FAULTS];
    uint64_t nfaults;
    struct fpgasim_dma_entry dma[DMA_LOG];
    uint64_t ndma;
    double busy_start[BUSY_LOG], busy_end[BUSY_LOG];
    uint64_t nbusy;
    int dirty;
    double state_checked;
    uint64_t key[3];
    int key_valid;
};

struct buf {
    uint64_t id;
    int card;
    int64_t owner;
    int bank, userptr, alias;
    uint64_t address, size;
    unsigned char *host, *dev, *touched;
    size_t host_map, dev_map; /* bytes mapped here (0: not ours) */
};

/* One lock for every card (state, timeline, buffers); never held while sleeping or calling
 * out; the condition is broadcast when an event could come earlier than a waiter computed. */
static pthread_mutex_t L = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t CV;
static pthread_once_t cv_once = PTHREAD_ONCE_INIT;
static struct card cards[FPGASIM_MAX_CARDS];
static struct model **models;
static int nmodels;
static struct cmd *submitting;
static double due = -INFINITY; /* no event of any card is due before this (-inf: unknown) */

static void init_cv(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&CV, &a);
    pthread_condattr_destroy(&a);
}

static void changed(void)
{
    due = -INFINITY;
}

/* ------------------------------------------------------------------ id tables */
struct table {
    void **slot;
    uint32_t *gen;
    uint32_t n, cap;
};
static struct table buffers, commands;

static uint64_t table_put(struct table *t, void *p)
{
    uint32_t i;
    for (i = 0; i < t->n; i++)
        if (t->slot[i] == NULL)
            break;
    if (i == t->n) {
        if (t->n == t->cap) {
            uint32_t cap = t->cap ? 2 * t->cap : 64;
            void **s = realloc(t->slot, cap * sizeof *s);
            uint32_t *g = realloc(t->gen, cap * sizeof *g);
            if (s == NULL || g == NULL) {
                if (s != NULL)
                    t->slot = s;
                if (g != NULL)
                    t->gen = g;
                return 0;
            }
            t->slot = s;
            t->gen = g;
            t->cap = cap;
        }
        t->gen[t->n] = 0;
        t->n++;
    }
    t->slot[i] = p;
    t->gen[i]++;
    return ((uint64_t)t->gen[i] << 32) | (uint64_t)(i + 1);
}

static void *table_get(struct table *t, uint64_t id)
{
    uint32_t i = (uint32_t)(id & 0xffffffffu);
    if (i == 0 || i > t->n)
        return NULL;
    if (t->gen[i - 1] != (uint32_t)(id >> 32))
        return NULL;
    return t->slot[i - 1];
}

static void table_del(struct table *t, uint64_t id)
{
    uint32_t i = (uint32_t)(id & 0xffffffffu);
    if (i >= 1 && i <= t->n && t->gen[i - 1] == (uint32_t)(id >> 32))
        t->slot[i - 1] = NULL;
}

/* ------------------------------------------------------------------ notifications */
struct note {
    int32_t kind, card, cu, flag;
    char *text;
    struct note *next;
};
static struct note *notes, **notes_tail = &notes;
static fpgasim_notify_fn notify;
static int dirty_fd = -1;

API void fpgasim_set_notify(fpgasim_notify_fn fn)
{
    pthread_mutex_lock(&L);
    notify = fn;
    pthread_mutex_unlock(&L);
}

/* under L */
static void note(int32_t kind, int32_t card, int32_t cu, int32_t flag, char *text)
{
    struct note *n = calloc(1, sizeof *n);
    if (n == NULL) {
        free(text);
        return;
    }
    n->kind = kind;
    n->card = card;
    n->cu = cu;
    n->flag = flag;
    n->text = text;
    *notes_tail = n;
    notes_tail = &n->next;
}

static void log_warning(int card, char *text)
{
    note(FPGASIM_NOTE_LOG, card, -1, 0, text);
}

static void log_error(int card, char *text)
{
    note(FPGASIM_NOTE_LOG, card, -1, 1, text);
}

/* Hand queued notifications to the cold path: called with L released. */
static void dispatch(void)
{
    if (__atomic_load_n(&notes, __ATOMIC_RELAXED) == NULL)
        return;
    pthread_mutex_lock(&L);
    struct note *list = notes;
    fpgasim_notify_fn fn = notify;
    notes = NULL;
    notes_tail = &notes;
    pthread_mutex_unlock(&L);
    while (list != NULL) {
        struct note *n = list;
        list = n->next;
        if (fn != NULL)
            fn(n->kind, n->card, n->cu, n->flag, n->text ? n->text : "");
        else if (n->kind == FPGASIM_NOTE_LOG && n->text)
            fprintf(stderr, "fpga_sim: %s\n", n->text);
        free(n->text);
        free(n);
    }
}

/* The stats file of a card is written within 50 ms of a change, by the cold path's flusher,
 * which blocks reading this eventfd: kicked when a card turns dirty. */
API int32_t fpgasim_dirty_fd(void)
{
    pthread_mutex_lock(&L);
    if (dirty_fd < 0)
        dirty_fd = eventfd(0, EFD_CLOEXEC);
    int fd = dirty_fd;
    pthread_mutex_unlock(&L);
    return fd;
}

static void mark_dirty(struct card *c)
{
    if (!c->dirty) {
        c->dirty = 1;
        if (dirty_fd >= 0) {
            uint64_t one = 1;
            ssize_t ignored = write(dirty_fd, &one, sizeof one);
            (void)ignored;
        }
    }
}

API int32_t fpgasim_take_dirty(int32_t card)
{
    if (card < 0 || card >= FPGASIM_MAX_CARDS)
        return 0;
    pthread_mutex_lock(&L);
    int d = cards[card].dirty;
    cards[card].dirty = 0;
    pthread_mutex_unlock(&L);
    return d;
}

static void fault(struct card *c, char *text)
{
    if (text == NULL)
        return;
    uint64_t i = c->nfaults++ % MAX_FAULTS;
    free(c->faults[i]);
    c->faults[i] = text;
}

#define ENTER()                                                                                   \
    do {                                                                                          \
        pthread_once(&cv_once, init_cv);                                                          \
        fpgasim_meter_enter();                                                                    \
        pthread_mutex_lock(&L);                                                                   \
    } while (0)
#define LEAVE()                                                                                   \
    do {                                                                                          \
        pthread_mutex_unlock(&L);                                                                 \
        dispatch();                                                                               \
        fpgasim_meter_leave();                                                                    \
    } while (0)

static struct card *card_at(int32_t card)
{
    if (card < 0 || card >= FPGASIM_MAX_CARDS || !cards[card].present)
        return NULL;
    return &cards[card];
}

/* ------------------------------------------------------------------ concurrency and rendezvous */
static struct {
    int64_t executing, peak, wanted, rendezvous_peak;
    int state; /* 0 off, 1 waiting, 2 met, 3 timed out */
    double timeout_s;
} conc = {0, 0, 0, 0, 0, DEFAULT_RENDEZVOUS_TIMEOUT_S};

static int rendezvous_timeout(double *out)
{
    double v;
    const char *text = getenv("FPGASERVE_SIM_RENDEZVOUS_TIMEOUT_S");
    if (env_number("FPGASERVE_SIM_RENDEZVOUS_TIMEOUT_S", &v) < 0)
        return fail(FPGASIM_ESIM, "FPGASERVE_SIM_RENDEZVOUS_TIMEOUT_S must be a number, got '%s'", text);
    *out = v > 0 ? v : DEFAULT_RENDEZVOUS_TIMEOUT_S;
    return 0;
}

static void advance(double now);

/* under L */
static int arm_locked(int64_t n, double timeout_s)
{
    if (n < 1)
        return fail(FPGASIM_ESIM, "a rendezvous needs at least one kernel, got %lld", (long long)n);
    if (timeout_s <= 0 && rendezvous_timeout(&timeout_s) < 0)
        return -FPGASIM_ESIM;
    conc.wanted = n;
    conc.timeout_s = timeout_s;
    conc.rendezvous_peak = conc.executing;
    conc.state = conc.executing >= n ? 2 : 1;
    return 0;
}

/* timeout_s <= 0: FPGASERVE_SIM_RENDEZVOUS_TIMEOUT_S, else 20 s */
API int32_t fpgasim_arm(int64_t n, double timeout_s)
{
    ENTER();
    advance(now_s());
    int rc = arm_locked(n, timeout_s);
    LEAVE();
    return rc;
}

API void fpgasim_disarm(void)
{
    ENTER();
    conc.wanted = 0;
    conc.state = 0;
    conc.rendezvous_peak = 0;
    LEAVE();
}

/* out: max concurrent kernels, wanted, state (0 off 1 waiting 2 met 3 timed out), peak */
API void fpgasim_concurrency(int64_t out[4])
{
    ENTER();
    advance(now_s());
    out[0] = conc.peak;
    out[1] = conc.wanted;
    out[2] = conc.state;
    out[3] = conc.rendezvous_peak;
    LEAVE();
}

/* A command started executing: 1 when it must be held for the rendezvous. */
static int began(void)
{
    conc.executing++;
    if (conc.executing > conc.peak)
        conc.peak = conc.executing;
    if (conc.state != 1)
        return 0;
    if (conc.executing > conc.rendezvous_peak)
        conc.rendezvous_peak = conc.executing;
    if (conc.executing >= conc.wanted) {
        conc.state = 2;
        return 0;
    }
    return 1;
}

static void release_held(double t)
{
    changed();
    for (int c = 0; c < FPGASIM_MAX_CARDS; c++) {
        if (!cards[c].present)
            continue;
        for (int i = 0; i < cards[c].ncus; i++)
            for (struct cmd *x = cards[c].cus[i].head; x; x = x->next)
                if (x->state == S_HELD) {
                    x->state = S_RUNNING;
                    x->end_t = x->natural_end > t ? x->natural_end : t;
                }
    }
    pthread_cond_broadcast(&CV);
}

/* ------------------------------------------------------------------ device memory */
static void dev_fill(struct buf *b, uint64_t start, uint64_t stop)
{
    if (b->touched == NULL || stop <= start)
        return;
    uint64_t p0 = start / PAGE, p1 = (stop + PAGE - 1) / PAGE;
    for (uint64_t p = p0; p < p1; p++) {
        if (b->touched[p])
            continue;
        uint64_t q = p;
        while (q < p1 && !b->touched[q])
            q++;
        uint64_t end = q * PAGE < b->size ? q * PAGE : b->size;
        memset(b->dev + p * PAGE, 0xA5, end - p * PAGE);
        memset(b->touched + p, 1, q - p);
        p = q;
    }
}

static const unsigned char *dev_read(struct buf *b, uint64_t start, uint64_t n)
{
    dev_fill(b, start, start + n);
    return b->dev + start;
}

/* Before n bytes at start are overwritten: only partly covered pages need their 0xA5 first. */
static void dev_prepare_write(struct buf *b, uint64_t start, uint64_t n)
{
    if (b->touched == NULL || n == 0)
        return;
    uint64_t stop = start + n, first = start / PAGE, last = (stop - 1) / PAGE;
    if (start % PAGE)
        dev_fill(b, first * PAGE, (first + 1) * PAGE);
    if (stop % PAGE && stop != b->size)
        dev_fill(b, last * PAGE, (last + 1) * PAGE);
    memset(b->touched + first, 1, last + 1 - first);
}

static void dev_write(struct buf *b, uint64_t start, const void *data, uint64_t n)
{
    dev_prepare_write(b, start, n);
    memcpy(b->dev + start, data, n);
}

/* The live buffer of card c holding [address, address + n), or NULL. */
static struct buf *buffer_at(int c, uint64_t address, uint64_t n)
{
    for (uint32_t i = 0; i < buffers.n; i++) {
        struct buf *b = buffers.slot[i];
        if (b != NULL && b->card == c && b->address <= address && address + n <= b->address + b->size)
            return b;
    }
    return NULL;
}

/* ------------------------------------------------------------------ pages a user pointer names */
struct procmap_query {
    uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
#define PROCMAP_QUERY _IOWR('f', 17, struct procmap_query)
static __thread int maps_fd = -1, maps_ioctl = 1;
static __thread pid_t maps_pid;

/* Whether every page of [address, address + size) is mapped writable here (what pinning them
 * for the device's writes needs): PROCMAP_QUERY, one ioctl per VMA, or /proc/self/maps. */
static int pages_writable(uint64_t address, uint64_t size)
{
    uint64_t covered = address - address % PAGE, end = address + (size ? size : 1);
    if (maps_pid != getpid()) {
        if (maps_fd >= 0)
            close(maps_fd);
        maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
        maps_pid = getpid();
        maps_ioctl = 1;
    }
    if (maps_fd >= 0 && maps_ioctl) {
        struct procmap_query q;
        int ok = 1;
        while (covered < end) {
            memset(&q, 0, sizeof q);
            q.size = sizeof q;
            q.query_addr = covered;
            if (ioctl(maps_fd, PROCMAP_QUERY, &q) != 0) {
                if (errno == ENOTTY || errno == EINVAL || errno == EOPNOTSUPP) {
                    maps_ioctl = 0;
                    break;
                }
                return 0; /* ENOENT: a hole */
            }
            if (q.vma_start > covered || !(q.vma_flags & 2))
                return 0;
            covered = q.vma_end;
        }
        if (maps_ioctl)
            return ok;
        covered = address - address % PAGE;
    }
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return 0;
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) != 3)
            continue;
        if (hi <= covered)
            continue;
        if (lo > covered || perms[1] != 'w')
            break;
        covered = hi;
        if (covered >= end) {
            found = 1;
            break;
        }
    }
    fclose(f);
    return found;
}

/* ------------------------------------------------------------------ buffers */
static void *map_anon(size_t size)
{
    void *p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static int cmp_u64pair(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Where size bytes go in topology bank bank (xocl's checks and drm_mm's first fit). */
static int place(int c, uint64_t size, int bank, const char *what, uint64_t *out)
{
    struct card *cd = &cards[c];
    if (size == 0 || !cd->adopted || !cd->loaded || bank < 0 || bank >= cd->ngroups || !cd->groups[bank].used)
        return fail(EINVAL, "%s", what);
    const struct fpgasim_group *g = &cd->groups[bank];
    uint64_t need = (size + PAGE - 1) / PAGE * PAGE;
    uint64_t n = 0, (*taken)[2] = malloc((buffers.n + 1) * sizeof *taken);
    if (taken == NULL)
        return fail(ENOMEM, "%s", what);
    for (uint32_t i = 0; i < buffers.n; i++) {
        struct buf *b = buffers.slot[i];
        if (b != NULL && b->card == c) {
            taken[n][0] = b->address;
            taken[n][1] = b->address + (b->size + PAGE - 1) / PAGE * PAGE;
            n++;
        }
    }
    qsort(taken, n, sizeof *taken, cmp_u64pair);
    uint64_t cursor = g->base;
    for (uint64_t i = 0; i < n; i++) {
        if (taken[i][1] <= cursor || taken[i][0] >= g->base + g->size)
            continue;
        if (taken[i][0] - cursor >= need)
            break;
        if (taken[i][1] > cursor)
            cursor = taken[i][1];
    }
    free(taken);
    if (cursor + need > g->base + g->size)
        return fail(ENOMEM, "%s", what);
    *out = cursor;
    return 0;
}

static void buf_unmap(struct buf *b)
{
    if (b->dev_map)
        munmap(b->dev, b->dev_map);
    if (b->host_map)
        munmap(b->host, b->host_map);
    free(b->touched);
    free(b);
}

/* A buffer of size bytes in topology bank `bank` of card `card` for handle `owner`:
 * FPGASIM_BO_USERPTR: over the caller's memory at host (xocl: page-aligned, the bank's checks,
 * pages mapped writable); FPGASIM_BO_HOST_GIVEN: host memory the caller provides and keeps;
 * FPGASIM_BO_DEVICE_ONLY: none; else host memory mapped here. out: id, device address, host
 * address (0 for device-only). */
API int64_t fpgasim_bo_alloc(int32_t card, int64_t owner, uint64_t size, int32_t bank, int32_t flags, void *host,
                             uint64_t out[3])
{
    int userptr = flags & FPGASIM_BO_USERPTR;
    const char *what = userptr ? "failed to allocate userptr bo" : "failed to allocate bo";
    ENTER();
    int64_t rc;
    struct card *c = card_at(card);
    uint64_t address = 0;
    struct buf *b = NULL;
    if (c == NULL) {
        rc = fail(EINVAL, "%s", what);
        goto out;
    }
    if (userptr && ((uintptr_t)host % PAGE || host == NULL)) {
        rc = fail(EINVAL, "%s", what);
        goto out;
    }
    if ((rc = place(card, size, bank, what, &address)) < 0)
        goto out;
    if (userptr && !pages_writable((uint64_t)(uintptr_t)host, size)) {
        rc = fail(ENOMEM, "%s", what);
        goto out;
    }
    b = calloc(1, sizeof *b);
    if (b == NULL) {
        rc = fail(ENOMEM, "%s", what);
        goto out;
    }
    b->card = card;
    b->owner = owner;
    b->bank = bank;
    b->address = address;
    b->size = size;
    b->userptr = userptr != 0;
    if (userptr || (flags & FPGASIM_BO_HOST_GIVEN)) {
        b->host = host;
    } else if (!(flags & FPGASIM_BO_DEVICE_ONLY)) {
        b->host_map = (size + PAGE - 1) / PAGE * PAGE;
        b->host = map_anon(b->host_map);
        if (b->host == NULL) {
            free(b);
            b = NULL;
            rc = fail(ENOMEM, "%s", what);
            goto out;
        }
    }
    if (c->mode == FPGASIM_TIMING && b->host != NULL) {
        b->dev = b->host; /* device memory is the host memory: nothing moves */
        b->alias = 1;
    } else {
        b->dev_map = (size + PAGE - 1) / PAGE * PAGE;
        b->dev = map_anon(b->dev_map);
        b->touched = calloc((size + PAGE - 1) / PAGE, 1);
        if (b->dev == NULL || b->touched == NULL) {
            if (b->dev == NULL)
                b->dev_map = 0;
            buf_unmap(b);
            b = NULL;
            rc = fail(ENOMEM, "%s", what);
            goto out;
        }
    }
    b->id = table_put(&buffers, b);
    if (b->id == 0) {
        buf_unmap(b);
        b = NULL;
        rc = fail(ENOMEM, "%s", what);
        goto out;
    }
    if (c->st.buffers++ == 0)
        note(FPGASIM_NOTE_BUFFERS, card, -1, 1, NULL);
    mark_dirty(c);
    out[0] = b->id;
    out[1] = address;
    out[2] = (uint64_t)(uintptr_t)b->host;
    rc = (int64_t)b->id;
out:
    LEAVE();
    return rc;
}

static void free_locked(struct buf *b)
{
    struct card *c = &cards[b->card];
    table_del(&buffers, b->id);
    if (c->st.buffers > 0 && --c->st.buffers == 0)
        note(FPGASIM_NOTE_BUFFERS, b->card, -1, 0, NULL);
    mark_dirty(c);
    buf_unmap(b);
}

API int32_t fpgasim_bo_free(uint64_t bo)
{
    ENTER();
    struct buf *b = table_get(&buffers, bo);
    if (b != NULL)
        free_locked(b);
    LEAVE();
    return 0;
}

/* Free the buffers of `owner` on card (owner < 0: every buffer of the card); how many. */
API int32_t fpgasim_bo_free_owned(int32_t card, int64_t owner)
{
    int n = 0;
    ENTER();
    for (uint32_t i = 0; i < buffers.n; i++) {
        struct buf *b = buffers.slot[i];
        if (b != NULL && b->card == card && (owner < 0 || b->owner == owner)) {
            free_locked(b);
            n++;
        }
    }
    LEAVE();
    return n;
}

/* The card's live buffers (at most max of them into out); how many there are. */
API int32_t fpgasim_buffers(int32_t card, struct fpgasim_buffer_info *out, int32_t max)
{
    int n = 0;
    ENTER();
    for (uint32_t i = 0; i < buffers.n; i++) {
        struct buf *b = buffers.slot[i];
        if (b != NULL && b->card == card) {
            if (n < max) {
                out[n].id = b->id;
                out[n].address = b->address;
                out[n].size = b->size;
                out[n].bank = b->bank;
                out[n].userptr = b->userptr;
            }
            n++;
        }
    }
    LEAVE();
    return n;
}

/* dst gets n of src's device bytes (XRT's copy of an argument into a bank its CU reaches). */
API int32_t fpgasim_bo_copy(uint64_t src, uint64_t src_off, uint64_t dst, uint64_t dst_off, uint64_t n)
{
    int rc = 0;
    ENTER();
    struct buf *a = table_get(&buffers, src), *b = table_get(&buffers, dst);
    if (a != NULL && b != NULL && src_off + n <= a->size && dst_off + n <= b->size && n) {
        const unsigned char *from = dev_read(a, src_off, n);
        if (b->dev != a->dev || dst_off != src_off) { /* (the same bytes: nothing to move) */
            dev_prepare_write(b, dst_off, n);
            memmove(b->dev + dst_off, from, n);
        }
    } else if (a == NULL || b == NULL) {
        rc = fail(ENOENT, "no such buffer");
    }
    LEAVE();
    return rc;
}

/* Device memory as it is now (tests; a host API cannot read it). */
API int32_t fpgasim_read_device(uint64_t bo, uint64_t offset, uint64_t n, void *out)
{
    int rc = 0;
    ENTER();
    advance(now_s());
    struct buf *b = table_get(&buffers, bo);
    if (b == NULL)
        rc = fail(ENOENT, "no such buffer");
    else if (offset > b->size || n > b->size - offset)
        rc = fail(EINVAL, "past the buffer's end");
    else
        memcpy(out, dev_read(b, offset, n), n);
    LEAVE();
    return rc;
}

/* ------------------------------------------------------------------ DMA */
static int any_running(struct card *c)
{
    for (int i = 0; i < c->ncus; i++)
        for (struct cmd *x = c->cus[i].head; x; x = x->next)
            if (x->state == S_RUNNING)
                return 1;
    return 0;
}

static int user_copy(void *local, void *remote, uint64_t n, int read)
{
    uint64_t done = 0;
    while (done < n) {
        struct iovec lv = {(char *)local + done, n - done}, rv = {(char *)remote + done, n - done};
        ssize_t got = read ? process_vm_readv(getpid(), &lv, 1, &rv, 1, 0)
                           : process_vm_writev(getpid(), &lv, 1, &rv, 1, 0);
        if (got <= 0)
            return got < 0 ? errno : EFAULT;
        done += (uint64_t)got;
    }
    return 0;
}

/* Move size bytes at offset of bo between its host and device copies, blocking (without any
 * lock) until the transfer's modelled end on the card's channel for that direction. */
API int32_t fpgasim_dma(uint64_t bo, uint64_t offset, uint64_t size, int32_t to_device)
{
    double end = 0.0;
    int rc = 0;
    ENTER();
    struct buf *b = table_get(&buffers, bo);
    if (b == NULL) {
        rc = fail(ENOENT, "failed to sync bo");
        goto out;
    }
    if (size == 0)
        goto out;
    if (offset > b->size || size > b->size - offset) {
        rc = fail(EINVAL, "failed to sync bo");
        goto out;
    }
    double rate;
    if ((rc = fpgasim_pcie_rate(&rate)) < 0)
        goto out;
    struct card *c = &cards[b->card];
    double now = now_s();
    advance(now);
    int chan = to_device ? 0 : 1;
    double begin = now > c->chan_free[chan] ? now : c->chan_free[chan];
    if (to_device && any_running(c))
        c->st.dma_to_device_during_kernel++;
    end = begin + (double)size / rate;
    c->chan_free[chan] = end;
    if (!b->alias && b->host != NULL) {
        if (b->userptr) {
            int err;
            if (to_device) {
                dev_prepare_write(b, offset, size);
                err = user_copy(b->dev + offset, b->host + offset, size, 1);
            } else {
                err = user_copy((void *)dev_read(b, offset, size), b->host + offset, size, 0);
            }
            if (err) {
                rc = fail(FPGASIM_ESIM,
                          "user memory of buffer %llu (%s: %zu bytes at %p): the host must keep a user pointer's "
                          "memory mapped while its buffer object lives (XRT pins those pages)",
                          (unsigned long long)(b->id & 0xffffffffu), strerror(err), (size_t)size,
                          (void *)(b->host + offset));
                end = 0.0;
                goto out;
            }
        } else if (to_device) {
            dev_write(b, offset, b->host + offset, size);
        } else {
            memcpy(b->host + offset, dev_read(b, offset, size), size);
        }
    }
    struct fpgasim_dma_entry *e = &c->dma[c->ndma++ % DMA_LOG];
    e->begin = begin;
    e->end = end;
    e->size = size;
    e->to_device = to_device != 0;
    if (to_device) {
        c->st.bytes_to_device += size;
        if (b->userptr)
            c->st.bytes_to_device_userptr += size;
        c->st.dma_s_to_device += end - begin;
    } else {
        c->st.bytes_from_device += size;
        if (b->userptr)
            c->st.bytes_from_device_userptr += size;
        c->st.dma_s_from_device += end - begin;
    }
    mark_dirty(c);
out:
    pthread_mutex_unlock(&L);
    dispatch();
    if (end - now_s() > DMA_SLEEP_ABOVE_S)
        sleep_until(end);
    fpgasim_meter_leave();
    return rc;
}

/* The card's last transfers, oldest first (at most max); how many are kept. */
API int32_t fpgasim_dma_log(int32_t card, struct fpgasim_dma_entry *out, int32_t max)
{
    int n = 0;
    ENTER();
    struct card *c = card_at(card);
    if (c != NULL) {
        uint64_t kept = c->ndma < DMA_LOG ? c->ndma : DMA_LOG;
        for (uint64_t i = c->ndma - kept; i < c->ndma && n < max; i++)
            out[n++] = c->dma[i % DMA_LOG];
    }
    LEAVE();
    return n;
}

/* ------------------------------------------------------------------ kernel models */
static struct model *model_at(int id)
{
    return id >= 1 && id <= nmodels ? models[id - 1] : NULL;
}

/* A kernel model (the cold path read the project); its id. */
API int32_t fpgasim_model_new(const struct fpgasim_model *d)
{
    int32_t id;
    ENTER();
    struct model *m = calloc(1, sizeof *m);
    struct model **grown = realloc(models, (size_t)(nmodels + 1) * sizeof *grown);
    if (m == NULL || grown == NULL) {
        free(m);
        if (grown != NULL)
            models = grown;
        id = fail(ENOMEM, "no memory for a kernel model");
    } else {
        models = grown;
        m->d = *d;
        pthread_mutex_init(&m->serial, NULL);
        models[nmodels++] = m;
        id = nmodels;
    }
    LEAVE();
    return id;
}

/* The effective timing of a model: latency, ii, ii_eff, clock MHz, delay ms (the environment's
 * FPGASERVE_SIM_KERNEL_LATENCY, _II, _CLOCK_MHZ, _DELAY_MS over the model's, read now). */
static int timing(const struct model *m, int clock_mhz, double out[5])
{
    double v;
    if (env_number("FPGASERVE_SIM_KERNEL_LATENCY", &v) < 0)
        return -FPGASIM_ESIM;
    out[0] = v ? v : (double)m->d.latency;
    if (env_number("FPGASERVE_SIM_KERNEL_II", &v) < 0)
        return -FPGASIM_ESIM;
    out[1] = v ? v : (double)m->d.ii;
    out[2] = out[1] > (double)m->d.ii_datapath ? out[1] : (double)m->d.ii_datapath;
    if (env_number("FPGASERVE_SIM_KERNEL_CLOCK_MHZ", &v) < 0)
        return -FPGASIM_ESIM;
    out[3] = v ? v : (double)clock_mhz;
    if (env_number("FPGASERVE_SIM_KERNEL_DELAY_MS", &v) < 0)
        return -FPGASIM_ESIM;
    out[4] = v;
    return 0;
}

API int32_t fpgasim_model_timing(int32_t model, int32_t clock_mhz, double out[5])
{
    int rc;
    ENTER();
    struct model *m = model_at(model);
    rc = m == NULL ? fail(EINVAL, "no such model") : timing(m, clock_mhz, out);
    LEAVE();
    return rc;
}

/* out: memo hits, misses */
API int32_t fpgasim_model_memo(int32_t model, uint64_t out[2])
{
    ENTER();
    struct model *m = model_at(model);
    out[0] = m ? m->hits : 0;
    out[1] = m ? m->misses : 0;
    LEAVE();
    return m ? 0 : -EINVAL;
}

/* Seconds one call of `rows` rows takes: (latency + II_eff * (rows - 1)) / f_clk + delay. */
static int kernel_seconds(const struct model *m, int64_t rows, int clock_mhz, double *out)
{
    double t[5];
    if (timing(m, clock_mhz, t) < 0)
        return -FPGASIM_ESIM;
    double cycles = rows > 0 ? t[0] + t[2] * (double)(rows > 1 ? rows - 1 : 0) : 1.0;
    *out = cycles / (t[3] * 1e6) + t[4] / 1000.0;
    return 0;
}

static uint64_t reg_value(const unsigned char *regs, uint32_t nregs, const struct fpgasim_arg *a)
{
    uint64_t v = 0;
    for (int i = 0; i < a->size && i < 8; i++) {
        uint32_t at = (uint32_t)a->offset + (uint32_t)i;
        if (at < nregs)
            v |= (uint64_t)regs[at] << (8 * i);
    }
    return v;
}

/* What the call does, read from the register image as the kernel reads it. */
static void plan(const struct model *m, const unsigned char *regs, uint32_t nregs, struct call *call)
{
    const struct fpgasim_model *d = &m->d;
    const struct fpgasim_arg *in = &d->args[FPGASIM_ARG_IN], *out = &d->args[FPGASIM_ARG_OUT];
    memset(call, 0, sizeof *call);
    call->nreads = call->nwrites = 1;
    call->reads[0].arg_id = in->id;
    call->reads[0].arg = in->name;
    call->reads[0].address = reg_value(regs, nregs, in);
    call->writes[0].arg_id = out->id;
    call->writes[0].arg = out->name;
    call->writes[0].address = reg_value(regs, nregs, out);
    switch (d->abi) {
    case FPGASIM_KRNL_RTL: {
        uint64_t len_in = reg_value(regs, nregs, &d->args[FPGASIM_ARG_LEN_IN]);
        uint64_t len_out = reg_value(regs, nregs, &d->args[FPGASIM_ARG_LEN_OUT]);
        int64_t rows = d->n_in ? (int64_t)(len_in / (uint64_t)d->n_in) : 0;
        call->rows = rows;
        call->reads[0].nbytes = 4 * len_in;
        call->writes[0].nbytes = 4 * len_out;
        if (len_in == 0 || len_in % (uint64_t)d->n_in)
            call->fault = dup_printf("length_r_in=%llu is not a positive multiple of N_IN=%d",
                                     (unsigned long long)len_in, d->n_in);
        else if (len_out != (uint64_t)rows * (uint64_t)d->n_out)
            call->fault = dup_printf("length_r_out=%llu but %lld rows produce %lld words (N_OUT=%d)",
                                     (unsigned long long)len_out, (long long)rows,
                                     (long long)rows * d->n_out, d->n_out);
        break;
    }
    case FPGASIM_KERNEL_WRAPPER: {
        int64_t rows = d->legacy ? d->batchsize : (int64_t)reg_value(regs, nregs, &d->args[FPGASIM_ARG_BATCHSIZE]);
        call->rows = rows;
        call->reads[0].nbytes = (uint64_t)rows * (uint64_t)d->n_in * (uint64_t)d->t_in.container;
        call->writes[0].nbytes = (uint64_t)rows * (uint64_t)d->n_out * (uint64_t)d->t_out.container;
        break;
    }
    default: /* FaaST: always 16,384 rows */
        call->rows = FAAST_ROWS;
        call->reads[0].nbytes = (uint64_t)FAAST_ROWS * BEAT;
        call->writes[0].nbytes = (uint64_t)FAAST_OUT_BEATS * BEAT;
        break;
    }
}

/* ------------------------------------------------------------------ computing a call */
static double raw_value(uint64_t bits, const struct fpgasim_type *t)
{
    int w = t->width;
    uint64_t mask = w >= 64 ? ~0ull : ((1ull << w) - 1);
    bits &= mask;
    int64_t v;
    if (t->is_signed && w < 64 && ((bits >> (w - 1)) & 1))
        v = (int64_t)(bits | ~mask);
    else
        v = (int64_t)bits;
    return ldexp((double)v, -(w - t->integer));
}

static void type_text(const struct fpgasim_type *t, char *out, size_t n)
{
    if (t->kind == 0)
        snprintf(out, n, "float");
    else if (t->kind == 1)
        snprintf(out, n, "double");
    else
        snprintf(out, n, "ap_%sfixed<%d,%d>", t->is_signed ? "" : "u", t->width, t->integer);
}

/* Exact values of t -> their integers; anything else is a simulator error (a C-simulation that
 * did not cast is reported, not rounded). */
static int values_to_raw(const double *v, size_t n, size_t stride, const struct fpgasim_type *t, const char *what,
                         int64_t *raw, char *err, size_t errlen)
{
    int f = t->width - t->integer;
    double lo = t->is_signed ? -ldexp(1.0, t->width - 1) : 0.0;
    double hi = t->is_signed ? ldexp(1.0, t->width - 1) : ldexp(1.0, t->width);
    size_t nbad = 0;
    char bad[256] = "";
    for (size_t i = 0; i < n; i++) {
        double x = v[i * stride], scaled = ldexp(x, f), r = rint(scaled);
        if (isfinite(scaled) && r == scaled && r >= lo && r < hi) {
            raw[i] = (int64_t)r;
        } else if (nbad++ < 3) {
            size_t at = strlen(bad);
            snprintf(bad + at, sizeof bad - at, "%s%.17g", at ? ", " : "", x);
        }
    }
    if (nbad) {
        char tt[64];
        type_text(t, tt, sizeof tt);
        snprintf(err, errlen, "C-simulation output [%s] is not a value of %s %s", bad, what, tt);
        return -1;
    }
    return 0;
}

static int exact_float32(const double *v, size_t n, const char *what, float *out, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        float f = (float)v[i];
        if (!((double)f == v[i] || (isnan(v[i]) && isnan(f)))) {
            snprintf(err, errlen, "C-simulation output is not a float32 value (%s = float)", what);
            return -1;
        }
        out[i] = f;
    }
    return 0;
}

/* The C-simulation of rows rows (x: float32 when x_float, else float64), as fpgaserve's
 * CsimLibrary.predict calls it: float64 rows of a library that takes float32 are converted
 * first, and its float32 results come back through a float. */
static int predict(struct model *m, const void *x, int x_float, double *y, long rows, char *err, size_t errlen)
{
    const struct fpgasim_model *d = &m->d;
    if (rows <= 0)
        return 0;
    float *tmp = NULL;
    int rc;
    if (!x_float && d->float_in) {
        tmp = malloc((size_t)rows * (size_t)d->n_in * sizeof *tmp);
        if (tmp == NULL) {
            snprintf(err, errlen, "no memory for the C-simulation's input");
            return -1;
        }
        for (long i = 0; i < rows * d->n_in; i++)
            tmp[i] = (float)((const double *)x)[i];
        x = tmp;
        x_float = 1;
    }
    if (d->serial)
        pthread_mutex_lock(&m->serial);
    rc = x_float ? d->predict_float(x, y, rows, d->stack_bytes) : d->predict_double(x, y, rows, d->stack_bytes);
    if (d->serial)
        pthread_mutex_unlock(&m->serial);
    free(tmp);
    if (rc) {
        snprintf(err, errlen, "cannot start the C-simulation's thread with its %llu MiB stack: %s",
                 (unsigned long long)(d->stack_bytes >> 20), strerror(rc));
        return -1;
    }
    if (d->float_out)
        for (long i = 0; i < rows * d->n_out; i++)
            y[i] = (double)(float)y[i];
    return 0;
}

static uint64_t load_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void store_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Output bytes of one call from its input bytes, at the ABI's hardware boundary (see
 * fpga_sim/kernels.py for each ABI's layout); 0, or -1 with err set. */
static int compute(struct model *m, const struct call *call, const unsigned char *in, size_t in_len,
                   unsigned char **out, size_t *out_len, char *err, size_t errlen)
{
    const struct fpgasim_model *d = &m->d;
    int64_t rows = call->rows;
    double *x = NULL, *y = NULL;
    int64_t *raw = NULL;
    unsigned char *o = NULL;
    int rc = -1;
    *out = NULL;
    *out_len = 0;
    if (d->predict_double == NULL || d->predict_float == NULL) {
        snprintf(err, errlen, "this model of the kernel plans calls only");
        return -1;
    }
    if (d->abi == FPGASIM_KERNEL_WRAPPER && rows == 0)
        return 0;
    size_t nin = (size_t)rows * (size_t)d->n_in, nout = (size_t)rows * (size_t)d->n_out;
    y = malloc((nout ? nout : 1) * sizeof *y);
    raw = malloc((nout ? nout : 1) * sizeof *raw);
    if (y == NULL || raw == NULL)
        goto nomem;
    if (d->abi == FPGASIM_KERNEL_WRAPPER && d->hw_quant) {
        /* float32 rows in card memory; the kernel converts, and returns (float)result_t */
        if (in_len < nin * 4)
            goto short_input;
        float *xf = malloc((nin ? nin : 1) * sizeof *xf);
        if (xf == NULL)
            goto nomem;
        memcpy(xf, in, nin * 4);
        rc = predict(m, xf, 1, y, (long)rows, err, errlen);
        free(xf);
        if (rc < 0)
            goto done;
        o = malloc(nout * 4 + 1);
        if (o == NULL)
            goto nomem;
        for (size_t i = 0; i < nout; i++) {
            float f = (float)y[i];
            memcpy(o + 4 * i, &f, 4);
        }
        *out = o;
        *out_len = nout * 4;
        o = NULL;
        rc = 0;
        goto done;
    }
    x = malloc((nin ? nin : 1) * sizeof *x);
    if (x == NULL)
        goto nomem;
    if (d->abi == FPGASIM_FAAST) {
        if (in_len < (size_t)FAAST_ROWS * BEAT)
            goto short_input;
        for (int64_t r = 0; r < rows; r++)
            for (int k = 0; k < d->n_in; k++)
                x[r * d->n_in + k] = raw_value(load_le(in + r * BEAT + 2 * k, 2), &d->t_in);
    } else {
        int c = d->abi == FPGASIM_KRNL_RTL ? 4 : d->t_in.container;
        if (in_len < nin * (size_t)c)
            goto short_input;
        for (size_t i = 0; i < nin; i++) {
            const unsigned char *p = in + i * (size_t)c;
            if (d->t_in.kind == 0) {
                float f;
                memcpy(&f, p, 4);
                x[i] = f;
            } else if (d->t_in.kind == 1) {
                memcpy(&x[i], p, 8);
            } else {
                x[i] = raw_value(load_le(p, c), &d->t_in);
            }
        }
    }
    if (predict(m, x, 0, y, (long)rows, err, errlen) < 0)
        goto done;
    if (d->abi == FPGASIM_KRNL_RTL) {
        o = malloc(nout * 4 + 1);
        if (o == NULL)
            goto nomem;
        if (d->t_out.kind == 0) {
            if (exact_float32(y, nout, "T_out", (float *)o, err, errlen) < 0)
                goto done;
        } else {
            if (values_to_raw(y, nout, 1, &d->t_out, "T_out", raw, err, errlen) < 0)
                goto done;
            uint64_t mask = d->t_out.width >= 64 ? ~0ull : ((1ull << d->t_out.width) - 1);
            for (size_t i = 0; i < nout; i++)
                store_le(o + 4 * i, (uint64_t)raw[i] & mask & 0xffffffffull, 4);
        }
        *out_len = nout * 4;
    } else if (d->abi == FPGASIM_KERNEL_WRAPPER) {
        int c = d->t_out.container;
        o = malloc(nout * (size_t)c + 1);
        if (o == NULL)
            goto nomem;
        if (d->t_out.kind == 0) {
            if (exact_float32(y, nout, "result_t", (float *)o, err, errlen) < 0)
                goto done;
        } else if (d->t_out.kind == 1) {
            memcpy(o, y, nout * 8);
        } else {
            if (values_to_raw(y, nout, 1, &d->t_out, "result_t", raw, err, errlen) < 0)
                goto done;
            for (size_t i = 0; i < nout; i++)
                store_le(o + (size_t)c * i, (uint64_t)raw[i], c);
        }
        *out_len = nout * (size_t)c;
    } else {
        /* FaaST: output row r is the raw 16 bits of the last output element */
        if (values_to_raw(y + (d->n_out - 1), (size_t)rows, (size_t)d->n_out, &d->t_out, "result_t", raw, err,
                          errlen) < 0)
            goto done;
        o = malloc((size_t)rows * 2 + 1);
        if (o == NULL)
            goto nomem;
        for (int64_t r = 0; r < rows; r++)
            store_le(o + 2 * r, (uint64_t)raw[r] & 0xffff, 2);
        *out_len = (size_t)rows * 2;
    }
    *out = o;
    o = NULL;
    rc = 0;
    goto done;
short_input:
    snprintf(err, errlen, "the call reads fewer bytes than its rows need");
    goto done;
nomem:
    snprintf(err, errlen, "no memory to compute the call");
done:
    free(x);
    free(y);
    free(raw);
    free(o);
    return rc;
}

static void memo_free(struct memo_entry *e)
{
    free(e->in);
    free(e->out);
    memset(e, 0, sizeof *e);
}

/* Outputs of the call, from the memo (the last few inputs, compared byte for byte) or computed. */
static int compute_memoized(struct model *m, const struct call *call, const unsigned char *in, size_t in_len,
                            unsigned char **out, size_t *out_len, char *err, size_t errlen)
{
    for (int i = 0; i < m->nmemo; i++) {
        struct memo_entry *e = &m->memo[i];
        if (e->rows == call->rows && e->in_len == in_len && memcmp(e->in, in, in_len) == 0) {
            struct memo_entry hit = *e;
            memmove(&m->memo[1], &m->memo[0], (size_t)i * sizeof *e);
            m->memo[0] = hit;
            m->hits++;
            *out = malloc(hit.out_len + 1);
            if (*out == NULL) {
                snprintf(err, errlen, "no memory for the call's outputs");
                return -1;
            }
            memcpy(*out, hit.out, hit.out_len);
            *out_len = hit.out_len;
            return 0;
        }
    }
    m->misses++;
    if (compute(m, call, in, in_len, out, out_len, err, errlen) < 0)
        return -1;
    if (in_len + *out_len > MEMO_MAX_BYTES)
        return 0;
    struct memo_entry e = {call->rows, in_len, *out_len, malloc(in_len + 1), malloc(*out_len + 1)};
    if (e.in == NULL || e.out == NULL) {
        memo_free(&e);
        return 0;
    }
    memcpy(e.in, in, in_len);
    memcpy(e.out, *out, *out_len);
    if (m->nmemo == MEMO_ENTRIES)
        memo_free(&m->memo[--m->nmemo]);
    memmove(&m->memo[1], &m->memo[0], (size_t)m->nmemo * sizeof e);
    m->memo[0] = e;
    m->nmemo++;
    size_t total = 0;
    for (int i = 0; i < m->nmemo; i++)
        total += m->memo[i].in_len + m->memo[i].out_len;
    while (m->nmemo > 1 && total > MEMO_MAX_BYTES) {
        struct memo_entry *last = &m->memo[--m->nmemo];
        total -= last->in_len + last->out_len;
        memo_free(last);
    }
    return 0;
}

/* ------------------------------------------------------------------ control requests */
/* The request files of the control folder (hang-card*, rendezvous), listed again only after
 * inotify reported one of them created, removed or renamed there (by any process), instead of
 * a directory read at every start: the event is queued by the system call that made the file,
 * before it returns, so a start after a request sees it. */
static struct {
    char folder[4096];
    pid_t pid;
    int fd, stale, nnames;
    char names[64][256];
} W = {"", 0, -1, 1, 0, {{0}}};

static void watch_close(void)
{
    if (W.fd >= 0)
        close(W.fd);
    W.fd = -1;
    W.stale = 1;
}

static void requests(const char *folder)
{
    if (strcmp(folder, W.folder) != 0 || W.pid != getpid()) {
        watch_close();
        snprintf(W.folder, sizeof W.folder, "%s", folder);
        W.pid = getpid();
        W.fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (W.fd >= 0 && inotify_add_watch(W.fd, folder, IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE |
                                                             IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR) < 0)
            watch_close();
    } else if (W.fd >= 0) {
        char buffer[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
        for (;;) {
            ssize_t n = read(W.fd, buffer, sizeof buffer);
            if (n <= 0) {
                if (n < 0 && errno == EINTR)
                    continue;
                if (n < 0 && errno != EAGAIN)
                    watch_close();
                break;
            }
            for (char *p = buffer; p < buffer + n;) {
                struct inotify_event *e = (struct inotify_event *)p;
                p += sizeof *e + e->len;
                if (e->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED | IN_Q_OVERFLOW))
                    W.stale = 1;
                else if (e->len && (!strncmp(e->name, "hang-card", 9) || !strncmp(e->name, "rendezvous", 10)))
                    W.stale = 1;
                if (e->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
                    watch_close();
                    W.folder[0] = '\0';
                    return;
                }
            }
        }
    }
    if (W.stale || W.fd < 0) {
        W.nnames = 0;
        DIR *dir = opendir(folder);
        if (dir == NULL) {
            watch_close();
            W.folder[0] = '\0'; /* not there (yet): no watch, list it next time */
            return;
        }
        struct dirent *e;
        while ((e = readdir(dir)) != NULL && W.nnames < 64)
            if (!strncmp(e->d_name, "hang-card", 9) || !strncmp(e->d_name, "rendezvous", 10))
                snprintf(W.names[W.nnames++], sizeof W.names[0], "%s", e->d_name);
        closedir(dir);
        W.stale = 0;
    }
}

static int requested(const char *name)
{
    for (int i = 0; i < W.nnames; i++)
        if (!strcmp(W.names[i], name))
            return 1;
    return 0;
}

static const char *control_dir(void)
{
    const char *d = getenv("FPGASERVE_SIM_CONTROL_DIR");
    return d != NULL && *d ? d : NULL;
}

static char *consume_hang_request(int card, const struct cu *cu)
{
    const char *folder = control_dir();
    char names[2][300];
    snprintf(names[0], sizeof names[0], "hang-card%d-%s", card, cu->name);
    snprintf(names[1], sizeof names[1], "hang-card%d", card);
    for (int i = 0; i < 2; i++) {
        if (!requested(names[i]))
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", folder, names[i]);
        if (unlink(path) == 0)
            return dup_printf("hang requested through the control folder (%s)", names[i]);
    }
    return NULL;
}

static int consume_rendezvous_request(void)
{
    const char *folder = control_dir();
    if (folder == NULL || !requested("rendezvous"))
        return 0;
    char path[4400], text[64] = "";
    snprintf(path, sizeof path, "%s/rendezvous", folder);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    if (unlink(path) != 0 && errno == ENOENT)
        return 0;
    char *end;
    long long want = strtoll(text, &end, 10);
    while (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r')
        end++;
    if (end == text || *end != '\0')
        return fail(FPGASIM_ESIM, "%s must contain the number of kernels to meet, got '%s'", path, text);
    int rc = arm_locked(want, 0.0);
    if (rc < 0)
        return rc;
    log_warning(-1, dup_printf("simulated cards: rendezvous of %lld kernels armed through %s", want, path));
    return 0;
}

/* ------------------------------------------------------------------ the timeline */
static double next_event(const struct cu *cu, const struct cmd *x)
{
    if (!x->started)
        return x->submit_t > cu->last_end ? x->submit_t : cu->last_end;
    if (x->state == S_HUNG)
        return INFINITY;
    if (x->state == S_HELD)
        return x->hold_deadline;
    return x->end_t;
}

static double next_wake(const struct cu *cu)
{
    return cu->head ? next_event(cu, cu->head) : INFINITY;
}

static void dequeue(struct cu *cu, struct cmd *x)
{
    struct cmd **at = &cu->head, *prev = NULL;
    for (; *at; prev = *at, at = &(*at)->next) {
        if (*at == x) {
            *at = x->next;
            if (cu->tail == x)
                cu->tail = prev;
            x->next = NULL;
            x->in_queue = 0;
            cu->qlen--;
            return;
        }
    }
}

static void cmd_free(struct cmd *x)
{
    table_del(&commands, x->id);
    free(x->regs);
    free(x->hang_reason);
    free(x->call.fault);
    free(x->out[0]);
    free(x);
}

static void maybe_free(struct cmd *x)
{
    if (x->refs <= 0 && !x->in_queue)
        cmd_free(x);
}

static void set_state_word(struct cmd *x, uint32_t state)
{
    if (x->state_word != NULL)
        __atomic_store_n(x->state_word, (__atomic_load_n(x->state_word, __ATOMIC_RELAXED) & ~0xfu) | state,
                         __ATOMIC_RELEASE);
}

static void hang(int card, struct cu *cu, struct cmd *x, const char *reason)
{
    struct card *c = &cards[card];
    changed();
    free(x->out[0]);
    x->out[0] = NULL;
    x->staged = 0;
    x->state = S_HUNG;
    x->end_t = INFINITY;
    int first = cu->hung == NULL;
    if (first)
        cu->hung = strdup(reason);
    c->st.hangs++;
    fault(c, dup_printf("%s: %s", cu->name, reason));
    log_warning(card, dup_printf("simulated card %d: kernel %s hangs: %s", card, cu->name, reason));
    if (first)
        note(FPGASIM_NOTE_HANG, card, cu->index, x->via_kds, strdup(reason));
    mark_dirty(c);
}

static char *check(int card, const struct cu *cu, const struct call *call)
{
    struct card *c = &cards[card];
    for (int k = 0; k < 2; k++) {
        int n = k ? call->nwrites : call->nreads;
        for (int i = 0; i < n; i++) {
            int arg_id = k ? call->writes[i].arg_id : call->reads[i].arg_id;
            const char *arg = k ? call->writes[i].arg : call->reads[i].arg;
            uint64_t address = k ? call->writes[i].address : call->reads[i].address;
            uint64_t nbytes = k ? call->writes[i].nbytes : call->reads[i].nbytes;
            if (nbytes == 0)
                continue;
            struct buf *b = buffer_at(card, address, nbytes);
            if (b == NULL)
                return dup_printf("%s: %llu bytes at 0x%llx are not inside one buffer allocated on this card", arg,
                                  (unsigned long long)nbytes, (unsigned long long)address);
            uint64_t members = c->groups[b->bank].members;
            uint64_t connected = arg_id >= 0 && arg_id < FPGASIM_MAX_ARGS ? cu->arg_banks[arg_id] : 0;
            if (members & ~connected) {
                char have[512] = "", want[512] = "";
                for (int m = 0; m < 64; m++) {
                    if (members >> m & 1) {
                        size_t at = strlen(have);
                        snprintf(have + at, sizeof have - at, "%s%s", at ? ", " : "", m < c->nmems ? c->mem_tags[m] : "?");
                    }
                    if (connected >> m & 1) {
                        size_t at = strlen(want);
                        snprintf(want + at, sizeof want - at, "%s%s", at ? ", " : "", m < c->nmems ? c->mem_tags[m] : "?");
                    }
                }
                const char *port = arg_id >= 0 && arg_id < FPGASIM_MAX_ARGS && cu->arg_port[arg_id][0]
                                       ? cu->arg_port[arg_id]
                                       : "its port";
                return dup_printf("%s: the buffer is in %s, but the CU's %s is connected to %s", arg, have, port,
                                  want[0] ? want : "no bank");
            }
        }
    }
    return NULL;
}

static void start(int card, struct cu *cu, struct cmd *x, double t)
{
    struct card *c = &cards[card];
    x->started = 1;
    x->start_t = t;
    if (cu->regs != NULL)
        memcpy(cu->regs, x->regs, x->nregs < cu->span ? x->nregs : cu->span);
    if (x->hang_reason || cu->hung || cu->hung_elsewhere) {
        char *why = x->hang_reason ? strdup(x->hang_reason)
                    : cu->hung     ? dup_printf("queued behind a hung command (%s)", cu->hung)
                                   : strdup("the CU is hung (since an earlier process)");
        hang(card, cu, x, why ? why : "hung");
        free(why);
        return;
    }
    struct model *m = model_at(cu->model);
    char *why = x->call.fault ? strdup(x->call.fault) : check(card, cu, &x->call);
    if (why != NULL) {
        hang(card, cu, x, why);
        free(why);
        return;
    }
    if (c->mode == FPGASIM_TIMING) {
        c->st.uncomputed_calls++;
    } else if (m != NULL) {
        /* reads device memory now and computes; the outputs land at completion */
        char err[1024] = "";
        const struct call *call = &x->call;
        struct buf *b = call->reads[0].nbytes ? buffer_at(card, call->reads[0].address, call->reads[0].nbytes) : NULL;
        const unsigned char *in = b ? dev_read(b, call->reads[0].address - b->address, call->reads[0].nbytes)
                                    : (const unsigned char *)"";
        if (compute_memoized(m, call, in, call->reads[0].nbytes, &x->out[0], &x->out_len[0], err, sizeof err) < 0) {
            char *text = dup_printf("simulator error: %s", err);
            log_error(card, dup_printf("simulated card %d: kernel %s: simulator error: %s", card, cu->name, err));
            hang(card, cu, x, text ? text : "simulator error");
            free(text);
            return;
        }
        x->staged = 1;
    }
    double seconds = x->est;
    if (x != submitting && m != NULL && kernel_seconds(m, x->call.rows, c->clock_mhz, &seconds) < 0)
        seconds = x->est;
    x->natural_end = t + seconds;
    x->end_t = x->natural_end;
    cu->rows += (uint64_t)(x->call.rows > 0 ? x->call.rows : 0);
    if (began()) {
        x->state = S_HELD;
        x->hold_deadline = t + conc.timeout_s;
        x->end_t = INFINITY;
    } else {
        x->state = S_RUNNING;
        if (conc.state == 2)
            release_held(t);
    }
}

static void complete(int card, struct cu *cu, struct cmd *x, double t)
{
    struct card *c = &cards[card];
    changed();
    if (x->staged && x->out[0] != NULL) {
        const struct call *call = &x->call;
        if (call->writes[0].nbytes) {
            struct buf *b = buffer_at(card, call->writes[0].address, call->writes[0].nbytes);
            if (b != NULL) {
                uint64_t at = call->writes[0].address - b->address;
                uint64_t n = x->out_len[0] < b->size - at ? x->out_len[0] : b->size - at;
                dev_write(b, at, x->out[0], n);
            }
        }
    }
    free(x->out[0]);
    x->out[0] = NULL;
    x->staged = 0;
    x->state = S_DONE;
    x->end_t = t;
    dequeue(cu, x);
    cu->last_end = t;
    cu->completed++;
    double s = x->started ? x->start_t : t;
    cu->busy_s += t - s;
    c->busy_start[c->nbusy % BUSY_LOG] = s;
    c->busy_end[c->nbusy % BUSY_LOG] = t;
    c->nbusy++;
    cu->done_latched = 1;
    c->st.kernel_completions++;
    conc.executing--;
    set_state_word(x, FPGASIM_COMPLETED);
    mark_dirty(c);
    maybe_free(x);
}

static void abort_cmd(int card, struct cu *cu, struct cmd *x)
{
    changed();
    free(x->out[0]);
    x->out[0] = NULL;
    x->staged = 0;
    if (x->state == S_RUNNING || x->state == S_HELD)
        conc.executing--;
    x->state = S_ABORTED;
    dequeue(cu, x);
    cards[card].st.aborted++;
    set_state_word(x, FPGASIM_ABORT);
    mark_dirty(&cards[card]);
    pthread_cond_broadcast(&CV);
    maybe_free(x);
}

/* Process every start and completion up to now on all cards, in time order (under L). */
static void advance(double now)
{
    if (now < due)
        return;
    for (;;) {
        int bc = -1;
        struct cu *bcu = NULL;
        double best = INFINITY, soonest = INFINITY;
        for (int c = 0; c < FPGASIM_MAX_CARDS; c++) {
            if (!cards[c].present)
                continue;
            for (int i = 0; i < cards[c].ncus; i++) {
                struct cu *cu = &cards[c].cus[i];
                if (!cu->head)
                    continue;
                double t = next_event(cu, cu->head);
                if (t <= now) {
                    if (bcu == NULL || t < best) {
                        best = t;
                        bc = c;
                        bcu = cu;
                    }
                } else if (t < soonest) {
                    soonest = t;
                }
            }
        }
        if (bcu == NULL) {
            due = soonest; /* nothing to do: nothing is due before the next event */
            return;
        }
        struct cmd *x = bcu->head;
        if (!x->started) {
            start(bc, bcu, x, best);
        } else if (x->state == S_HELD) {
            /* the rendezvous timed out for this command: it completes, with a fault */
            if (conc.state == 1) {
                conc.state = 3;
                char *text = dup_printf("rendezvous timeout: at most %lld of %lld kernels were executing at once "
                                        "within %g s (did the host serialize them?)",
                                        (long long)conc.rendezvous_peak, (long long)conc.wanted, conc.timeout_s);
                fault(&cards[bc], dup_printf("%s: %s", bcu->name, text));
                log_warning(bc, dup_printf("simulated card %d: kernel %s: %s", bc, bcu->name, text));
                free(text);
            }
            release_held(best);
        } else {
            complete(bc, bcu, x, best);
        }
    }
}

/* When x could finish, as its CU's queue stands (inf behind a hung or held command): what a
 * waiter sleeps until. Anything that could make it earlier (an abort, a teardown, a rendezvous
 * met) broadcasts; anything that makes it later is found when the waiter looks again. */
static double predicted_end(const struct cu *cu, const struct cmd *target)
{
    double t = cu->last_end;
    for (const struct cmd *x = cu->head; x; x = x->next) {
        if (x->state == S_HUNG || cu->hung)
            return INFINITY;
        if (x->state == S_HELD)
            return x == target ? x->hold_deadline : INFINITY;
        if (x->started)
            t = x->end_t;
        else
            t = (t > x->submit_t ? t : x->submit_t) + x->est;
        if (x == target)
            return t;
    }
    return INFINITY;
}

/* When cu could start a new command, assuming no hangs appear. */
static double free_at(const struct cu *cu, double now)
{
    double t = now > cu->last_end ? now : cu->last_end;
    for (const struct cmd *x = cu->head; x; x = x->next) {
        if (x->state == S_HUNG || x->state == S_HELD || cu->hung)
            return INFINITY;
        if (x->started && x->state == S_RUNNING)
            t = x->end_t;
        else
            t = (t > x->submit_t ? t : x->submit_t) + x->est;
    }
    return t;
}

/* The state file changed under this process (another process, xbutil): the cold path reads it
 * again (at most every STATE_CHECK_S; called with no lock held). */
static void state_check(int32_t card)
{
    const char *folder = control_dir();
    if (folder == NULL || card < 0 || card >= FPGASIM_MAX_CARDS)
        return;
    double now = now_s();
    pthread_mutex_lock(&L);
    struct card *c = &cards[card];
    int due_now = c->present && c->key_valid && now - c->state_checked >= STATE_CHECK_S;
    if (due_now)
        c->state_checked = now;
    uint64_t key[3] = {c->key[0], c->key[1], c->key[2]};
    pthread_mutex_unlock(&L);
    if (!due_now)
        return;
    char path[4400];
    struct stat s;
    snprintf(path, sizeof path, "%s/state-card%d.json", folder, card);
    uint64_t now_key[3] = {0, 0, 0};
    if (stat(path, &s) == 0) {
        now_key[0] = (uint64_t)s.st_ino;
        now_key[1] = (uint64_t)s.st_mtim.tv_sec * 1000000000ull + (uint64_t)s.st_mtim.tv_nsec;
        now_key[2] = (uint64_t)s.st_size;
    }
    if (memcmp(key, now_key, sizeof key) != 0) {
        pthread_mutex_lock(&L);
        note(FPGASIM_NOTE_STATE, card, -1, 0, NULL);
        pthread_mutex_unlock(&L);
        dispatch();
    }
}

static int64_t submit_locked(int32_t card, const int32_t *cus, int32_t ncus, const void *regs, uint32_t nregs,
                             int32_t need_context, uint32_t *state_word)
{
    struct card *c = card_at(card);
    double now = now_s();
    advance(now);
    if (c == NULL)
        return fail(EINVAL, "failed to launch execution buffer");
    if (need_context && c->bad_state) /* KDS refuses; register writes bypass it */
        return fail(EDEADLK, "failed to launch execution buffer");
    if (ncus <= 0 || !c->adopted)
        return fail(EINVAL, "failed to launch execution buffer");
    for (int i = 0; i < ncus; i++)
        if (cus[i] < 0 || cus[i] >= c->ncus)
            return fail(EINVAL, "failed to launch execution buffer");
    if (need_context) {
        int any = 0;
        for (int i = 0; i < ncus; i++)
            any |= c->cus[cus[i]].contexts > 0;
        if (!any)
            return fail(EINVAL, "failed to launch execution buffer");
    }
    struct cu *first = &c->cus[cus[0]];
    struct model *m = model_at(first->model);
    if (m == NULL)
        return fail(FPGASIM_ESIM, "%s",
                    first->model_error ? first->model_error
                                       : "no model of this kernel was built (xclbin given as bytes?)");
    struct cmd *x = calloc(1, sizeof *x);
    if (x == NULL)
        return fail(ENOMEM, "failed to launch execution buffer");
    x->regs = malloc(nregs ? nregs : 1);
    if (x->regs == NULL) {
        free(x);
        return fail(ENOMEM, "failed to launch execution buffer");
    }
    memcpy(x->regs, regs, nregs);
    x->nregs = nregs;
    plan(m, x->regs, nregs, &x->call);
    if (kernel_seconds(m, x->call.rows, c->clock_mhz, &x->est) < 0) {
        char saved[sizeof err_text];
        memcpy(saved, err_text, sizeof saved);
        cmd_free(x);
        memcpy(err_text, saved, sizeof saved);
        return -FPGASIM_ESIM;
    }
    struct cu *cu = first;
    if (ncus > 1) {
        double best = INFINITY;
        cu = NULL;
        for (int i = 0; i < ncus; i++) {
            struct cu *k = &c->cus[cus[i]];
            double t = free_at(k, now);
            if (cu == NULL || t < best || (t == best && k->index < cu->index)) {
                best = t;
                cu = k;
            }
        }
    }
    x->card = card;
    x->cu = cu->index;
    x->submit_t = now;
    x->start_t = NAN;
    x->end_t = INFINITY;
    x->natural_end = INFINITY;
    x->hold_deadline = INFINITY;
    x->via_kds = need_context != 0;
    x->state = S_QUEUED;
    x->state_word = state_word;
    x->id = table_put(&commands, x);
    if (x->id == 0) {
        cmd_free(x);
        return fail(ENOMEM, "failed to launch execution buffer");
    }
    const char *folder = control_dir();
    if (folder != NULL) {
        requests(folder);
        if (W.nnames) {
            x->hang_reason = consume_hang_request(card, cu);
            int rc = consume_rendezvous_request();
            if (rc < 0) {
                char saved[sizeof err_text];
                memcpy(saved, err_text, sizeof saved);
                cmd_free(x);
                memcpy(err_text, saved, sizeof saved);
                return rc;
            }
        }
    }
    for (int o = 0; o < FPGASIM_MAX_CARDS; o++) {
        if (o == card || !cards[o].present)
            continue;
        int hung = 0;
        for (int i = 0; i < cards[o].ncus; i++)
            hung |= cards[o].cus[i].hung != NULL;
        if (hung) {
            c->st.starts_while_another_card_hung++;
            break;
        }
    }
    x->refs = 1;
    x->in_queue = 1;
    if (cu->tail)
        cu->tail->next = x;
    else
        cu->head = x;
    cu->tail = x;
    cu->qlen++;
    changed();
    cu->commands++;
    c->st.kernel_starts++;
    submitting = x; /* a start within this call times it with est (the same reading) */
    advance(now);
    submitting = NULL;
    mark_dirty(c);
    return (int64_t)x->id;
}

/* Queue a start of one of the CUs `cus` (core indices) with the register image regs (offset 0 =
 * CTRL); the caller holds one reference to the command (fpgasim_cmd_release). need_context 0:
 * started by register writes, unknown to the driver. state_word: an ERT packet header whose low
 * 4 bits get the command's final state. */
API int64_t fpgasim_submit(int32_t card, const int32_t *cus, int32_t ncus, const void *regs, uint32_t nregs,
                           int32_t need_context, uint32_t *state_word)
{
    state_check(card);
    ENTER();
    int64_t rc = submit_locked(card, cus, ncus, regs, nregs, need_context, state_word);
    LEAVE();
    return rc;
}

API int32_t fpgasim_cmd_release(uint64_t id)
{
    ENTER();
    struct cmd *x = table_get(&commands, id);
    if (x != NULL) {
        x->refs--;
        maybe_free(x);
    }
    LEAVE();
    return 0;
}

static int32_t final_state(const struct cmd *x)
{
    return x->state == S_DONE ? FPGASIM_COMPLETED : x->state == S_ABORTED ? FPGASIM_ABORT : FPGASIM_NEW;
}

/* NEW until completion, COMPLETED, ABORT; -EINVAL for no such command. */
API int32_t fpgasim_cmd_state(uint64_t id)
{
    int32_t rc;
    ENTER();
    advance(now_s());
    struct cmd *x = table_get(&commands, id);
    rc = x == NULL ? fail(EINVAL, "no such command") : final_state(x);
    LEAVE();
    return rc;
}

API int32_t fpgasim_cmd_info(uint64_t id, struct fpgasim_cmd_info *out)
{
    int32_t rc = 0;
    ENTER();
    advance(now_s());
    struct cmd *x = table_get(&commands, id);
    if (x == NULL) {
        rc = fail(EINVAL, "no such command");
    } else {
        out->submit_t = x->submit_t;
        out->start_t = x->started ? x->start_t : NAN;
        out->end_t = x->end_t;
        out->natural_end = x->natural_end;
        out->est = x->est;
        out->state = x->state;
        out->cu = x->cu;
        out->rows = x->call.rows;
    }
    LEAVE();
    return rc;
}

/* Block until one of cmds finished (1) or timeout_s passed (0; < 0: no limit), sleeping until
 * the next modelled event of their CUs, or an earlier one someone else's call makes. */
API int32_t fpgasim_wait(const uint64_t *ids, int32_t n, double timeout_s)
{
    int32_t rc = 0;
    ENTER();
    double deadline = timeout_s < 0 ? INFINITY : now_s() + timeout_s;
    for (;;) {
        double now = now_s();
        advance(now);
        double wake = INFINITY;
        int finished = n == 0, valid = 0;
        for (int i = 0; i < n && !finished; i++) {
            struct cmd *x = table_get(&commands, ids[i]);
            if (x == NULL)
                continue;
            valid++;
            if (x->state == S_DONE || x->state == S_ABORTED) {
                finished = 1;
            } else {
                double w = predicted_end(&cards[x->card].cus[x->cu], x);
                if (w < wake)
                    wake = w;
            }
        }
        if (finished) {
            rc = 1;
            break;
        }
        if (!valid && n) {
            rc = fail(EINVAL, "no such command");
            break;
        }
        now = now_s();
        if (now >= deadline) {
            rc = 0;
            break;
        }
        double target = wake < deadline ? wake : deadline;
        if (!isfinite(target))
            target = now + 1.0;
        if (target > now) {
            struct timespec ts = abs_time(target);
            uint64_t c0 = thread_cpu_ns();
            pthread_cond_timedwait(&CV, &L, &ts);
            __atomic_add_fetch(&meter_blocked_ns, thread_cpu_ns() - c0, __ATOMIC_RELAXED);
        }
    }
    LEAVE();
    return rc;
}

/* Earliest time one of cmds could finish (inf if none can). */
API double fpgasim_next_completion(const uint64_t *ids, int32_t n)
{
    double t = INFINITY;
    ENTER();
    for (int i = 0; i < n; i++) {
        struct cmd *x = table_get(&commands, ids[i]);
        if (x != NULL && x->state != S_DONE && x->state != S_ABORTED) {
            double w = next_wake(&cards[x->card].cus[x->cu]);
            if (w < t)
                t = w;
        }
    }
    LEAVE();
    return t;
}

/* ------------------------------------------------------------------ closing contexts */
/* The driver's commands still outstanding on the CUs of mask (bit i: core CU i); counts[i] per
 * CU; the total. */
API int32_t fpgasim_outstanding(int32_t card, uint64_t mask, int32_t counts[FPGASIM_MAX_CUS])
{
    int total = 0;
    ENTER();
    advance(now_s());
    struct card *c = card_at(card);
    for (int i = 0; c != NULL && i < c->ncus && i < 64; i++) {
        counts[i] = 0;
        if (!(mask >> i & 1))
            continue;
        for (struct cmd *x = c->cus[i].head; x; x = x->next)
            if (x->via_kds && x->state != S_DONE && x->state != S_ABORTED)
                counts[i]++;
        total += counts[i];
    }
    LEAVE();
    return total;
}

/* kds_del_cu_context after its wait: on the CUs of mask, what still executes completes now,
 * what is queued is aborted, and a hung command is aborted and its CU reported in *hung (the
 * cold path sets bad_state). register_path: the process's hold on the card ends instead (last
 * handle closed): its queued register-path starts are aborted. */
API int32_t fpgasim_teardown(int32_t card, uint64_t mask, int32_t register_path, uint64_t *hung)
{
    ENTER();
    double now = now_s();
    advance(now);
    struct card *c = card_at(card);
    *hung = 0;
    for (int i = 0; c != NULL && i < c->ncus && i < 64; i++) {
        if (!register_path && !(mask >> i & 1))
            continue;
        struct cu *cu = &c->cus[i];
        struct cmd *x = cu->head;
        while (x != NULL) {
            struct cmd *nx = x->next;
            if (register_path) {
                if (!x->via_kds && x->state == S_QUEUED && !x->started)
                    abort_cmd(card, cu, x);
            } else if (x->via_kds && x->state != S_DONE && x->state != S_ABORTED) {
                if (x->state == S_RUNNING || x->state == S_HELD) {
                    complete(card, cu, x, x->start_t > now ? x->start_t : now);
                } else {
                    if (x->state == S_HUNG)
                        *hung |= 1ull << i;
                    abort_cmd(card, cu, x);
                }
            }
            x = nx;
        }
    }
    pthread_cond_broadcast(&CV);
    LEAVE();
    return 0;
}

/* ------------------------------------------------------------------ register path (PYNQ without ERT) */
static struct cu *cu_at(struct card *c, uint64_t address, uint64_t n, uint64_t *offset)
{
    for (int i = 0; i < c->ncus; i++) {
        struct cu *cu = &c->cus[i];
        if (cu->base <= address && address + n <= cu->base + cu->span) {
            *offset = address - cu->base;
            return cu;
        }
    }
    return NULL;
}

/* AXI-lite read: CTRL reflects the queue (ap_start while busy, ap_done clear-on-read, ap_idle
 * when empty; ap_ready is the RTL's one-cycle pulse, never seen by a read). */
API int32_t fpgasim_read_regs(int32_t card, uint64_t address, uint32_t n, unsigned char *out)
{
    int rc = 0;
    ENTER();
    advance(now_s());
    struct card *c = card_at(card);
    uint64_t offset = 0;
    struct cu *cu = c ? cu_at(c, address, n, &offset) : NULL;
    if (cu == NULL || cu->regs == NULL) {
        rc = fail(FPGASIM_ESIM, "register access at 0x%llx (+%u) hits no compute unit of card %d",
                  (unsigned long long)address, n, card);
    } else {
        memcpy(out, cu->regs + offset, n);
        if (offset == 0) {
            int busy = cu->head != NULL;
            uint32_t ctrl = (busy ? AP_START : 0) | (cu->done_latched ? AP_DONE : 0) | (busy ? 0 : AP_IDLE) |
                            (cu->auto_restart ? AUTO_RESTART : 0);
            for (uint32_t i = 0; i < 4 && i < n; i++)
                out[i] = (unsigned char)(ctrl >> (8 * i));
            cu->done_latched = 0;
        }
    }
    LEAVE();
    return rc;
}

/* AXI-lite writes, one 32-bit word after another in address order: a CTRL start in the same
 * write as the arguments starts the kernel with the old arguments; ap_start while the CU is busy
 * is ignored (no queue without ERT). */
API int32_t fpgasim_write_regs(int32_t card, uint64_t address, const unsigned char *data, uint32_t n)
{
    int rc = 0;
    ENTER();
    struct card *c = card_at(card);
    uint64_t offset = 0;
    struct cu *cu = c ? cu_at(c, address, n, &offset) : NULL;
    if (cu == NULL || cu->regs == NULL) {
        rc = fail(FPGASIM_ESIM, "register access at 0x%llx (+%u) hits no compute unit of card %d",
                  (unsigned long long)address, n, card);
    } else if (offset % 4 || n % 4) {
        rc = fail(FPGASIM_ESIM, "unaligned register write at 0x%llx (%u bytes)", (unsigned long long)address, n);
    } else {
        for (uint32_t k = 0; k < n && rc >= 0; k += 4) {
            uint64_t at = offset + k;
            uint32_t word = (uint32_t)load_le(data + k, 4);
            if (at == 0) {
                cu->auto_restart = (word & AUTO_RESTART) != 0;
                advance(now_s());
                if ((word & AP_START) && cu->head == NULL) {
                    cu->done_latched = 0;
                    int32_t one = cu->index;
                    int64_t id = submit_locked(card, &one, 1, cu->regs, (uint32_t)cu->span, 0, NULL);
                    if (id < 0) {
                        rc = (int)id;
                    } else {
                        struct cmd *x = table_get(&commands, (uint64_t)id);
                        if (x) { /* nobody holds it: the queue keeps it until it ends */
                            x->refs = 0;
                            maybe_free(x);
                        }
                    }
                }
            } else {
                memcpy(cu->regs + at, data + k, 4);
            }
        }
    }
    LEAVE();
    return rc;
}

/* ------------------------------------------------------------------ statistics */
API int32_t fpgasim_card_stats(int32_t card, struct fpgasim_card_stats *out)
{
    int rc = 0;
    ENTER();
    advance(now_s());
    struct card *c = card_at(card);
    if (c == NULL) {
        rc = fail(EINVAL, "no such card");
    } else {
        *out = c->st;
        out->nfaults = c->nfaults;
        out->mode = c->mode;
        out->ncus = c->ncus;
    }
    LEAVE();
    return rc;
}

/* reason: the CU's hang reason (up to size bytes, "" when it is not hung) */
API int32_t fpgasim_cu_stats(int32_t card, int32_t cu, struct fpgasim_cu_stats *out, char *reason, int32_t size)
{
    int rc = 0;
    ENTER();
    double now = now_s();
    advance(now);
    struct card *c = card_at(card);
    if (c == NULL || cu < 0 || cu >= c->ncus) {
        rc = fail(EINVAL, "no such compute unit");
    } else {
        struct cu *k = &c->cus[cu];
        out->commands = k->commands;
        out->completed = k->completed;
        out->rows = k->rows;
        out->queued = k->qlen;
        out->busy_s = k->busy_s;
        for (struct cmd *x = k->head; x; x = x->next)
            if (x->started && x->state != S_DONE)
                out->busy_s += now - x->start_t;
        out->hung = k->hung != NULL;
        if (size > 0)
            snprintf(reason, (size_t)size, "%s", k->hung ? k->hung : "");
    }
    LEAVE();
    return rc;
}

/* The i-th kept fault, oldest first (up to size bytes); 1, or 0 past the last. */
API int32_t fpgasim_fault(int32_t card, int32_t i, char *out, int32_t size)
{
    int rc = 0;
    ENTER();
    struct card *c = card_at(card);
    if (c != NULL) {
        uint64_t kept = c->nfaults < MAX_FAULTS ? c->nfaults : MAX_FAULTS;
        if (i >= 0 && (uint64_t)i < kept) {
            snprintf(out, (size_t)size, "%s", c->faults[(c->nfaults - kept + (uint64_t)i) % MAX_FAULTS]);
            rc = 1;
        }
    }
    LEAVE();
    return rc;
}

API int32_t fpgasim_add_fault(int32_t card, const char *text)
{
    ENTER();
    struct card *c = card_at(card);
    if (c != NULL)
        fault(c, strdup(text));
    LEAVE();
    return 0;
}

/* out: fraction of CUs executing now, CU-busy fraction of the window before now */
API int32_t fpgasim_activity(int32_t card, double now, double window_s, double out[2])
{
    ENTER();
    advance(now_s());
    struct card *c = card_at(card);
    out[0] = out[1] = 0.0;
    if (c != NULL) {
        int n = c->ncus > 0 ? c->ncus : 1, executing = 0;
        double since = now - window_s, busy = 0.0;
        uint64_t kept = c->nbusy < BUSY_LOG ? c->nbusy : BUSY_LOG;
        for (uint64_t i = c->nbusy - kept; i < c->nbusy; i++) {
            double s = c->busy_start[i % BUSY_LOG], e = c->busy_end[i % BUSY_LOG];
            double a = s > since ? s : since, b = e < now ? e : now;
            if (b > a)
                busy += b - a;
        }
        for (int i = 0; i < c->ncus; i++) {
            int running = 0;
            for (struct cmd *x = c->cus[i].head; x; x = x->next) {
                if (x->started && (x->state == S_RUNNING || x->state == S_HELD || x->state == S_HUNG)) {
                    double a = x->start_t > since ? x->start_t : since;
                    if (now > a)
                        busy += now - a;
                    running = 1;
                }
            }
            executing += running;
        }
        out[0] = (double)executing / n;
        out[1] = busy / (window_s * n);
        if (out[1] > 1.0)
            out[1] = 1.0;
    }
    LEAVE();
    return 0;
}

/* ------------------------------------------------------------------ cards */
static void card_clear_cus(int card)
{
    struct card *c = &cards[card];
    for (int i = 0; i < c->ncus; i++) {
        struct cu *cu = &c->cus[i];
        struct cmd *x = cu->head;
        while (x != NULL) {
            struct cmd *nx = x->next;
            if (x->state == S_RUNNING || x->state == S_HELD)
                conc.executing--;
            x->state = S_ABORTED;
            set_state_word(x, FPGASIM_ABORT);
            x->in_queue = 0;
            x->next = NULL;
            maybe_free(x);
            x = nx;
        }
        free(cu->regs);
        free(cu->hung);
        free(cu->model_error);
    }
    memset(c->cus, 0, sizeof c->cus);
    c->ncus = 0;
    c->adopted = 0;
    changed();
    pthread_cond_broadcast(&CV);
}

/* A card object of this process (made again: its counters start afresh). */
API int32_t fpgasim_card_init(int32_t card, int32_t mode)
{
    if (card < 0 || card >= FPGASIM_MAX_CARDS)
        return fail(EINVAL, "card index %d out of range", card);
    ENTER();
    struct card *c = &cards[card];
    if (c->present)
        card_clear_cus(card);
    for (uint32_t i = 0; i < buffers.n; i++) {
        struct buf *b = buffers.slot[i];
        if (b != NULL && b->card == card) {
            table_del(&buffers, b->id);
            buf_unmap(b);
        }
    }
    for (int i = 0; i < MAX_FAULTS; i++)
        free(c->faults[i]);
    memset(c, 0, sizeof *c);
    c->present = 1;
    c->mode = mode;
    c->clock_mhz = 300;
    LEAVE();
    return 0;
}

/* This process's view of the loaded xclbin: its CUs with empty queues (what was queued on the
 * old ones is gone). */
API int32_t fpgasim_card_adopt(int32_t card, const struct fpgasim_adopt *a)
{
    int rc = 0;
    ENTER();
    struct card *c = card_at(card);
    if (c == NULL || a->ngroups > FPGASIM_MAX_GROUPS || a->nmems > FPGASIM_MAX_MEMS || a->ncus > FPGASIM_MAX_CUS) {
        rc = fail(EINVAL, "the xclbin does not fit the simulated card's tables");
    } else {
        card_clear_cus(card);
        c->ngroups = a->ngroups;
        memcpy(c->groups, a->groups, sizeof c->groups);
        c->nmems = a->nmems;
        memcpy(c->mem_tags, a->mem_tags, sizeof c->mem_tags);
        c->clock_mhz = a->data_clock_mhz;
        for (int i = 0; i < a->ncus; i++) {
            struct cu *cu = &c->cus[i];
            const struct fpgasim_cu_desc *d = &a->cus[i];
            cu->index = i;
            memcpy(cu->name, d->name, sizeof cu->name);
            memcpy(cu->kernel, d->kernel, sizeof cu->kernel);
            cu->base = d->base;
            cu->span = d->span;
            memcpy(cu->arg_banks, d->arg_banks, sizeof cu->arg_banks);
            memcpy(cu->arg_port, d->arg_port, sizeof cu->arg_port);
            cu->regs = calloc(1, cu->span ? cu->span : 1);
        }
        c->ncus = a->ncus;
        c->adopted = 1;
        mark_dirty(c);
    }
    LEAVE();
    return rc;
}

/* After a device reset: nothing of the old xclbin is left on the card. */
API int32_t fpgasim_card_forget_local(int32_t card)
{
    ENTER();
    if (card_at(card) != NULL)
        card_clear_cus(card);
    LEAVE();
    return 0;
}

/* What the state file says (the cold path reads it): loaded (an xclbin is on the card),
 * bad_state, the CUs hung since an earlier process (bit i: core CU i), and the file's identity
 * (inode, mtime ns, size) when it was read. */
API int32_t fpgasim_card_state(int32_t card, int32_t loaded, int32_t bad_state, uint64_t hung_mask,
                               const uint64_t key[3])
{
    ENTER();
    struct card *c = card_at(card);
    if (c != NULL) {
        c->loaded = loaded;
        c->bad_state = bad_state;
        for (int i = 0; i < c->ncus && i < 64; i++)
            c->cus[i].hung_elsewhere = (int)(hung_mask >> i & 1);
        if (key != NULL) {
            memcpy(c->key, key, sizeof c->key);
            c->key_valid = 1;
            c->state_checked = now_s();
        } else {
            c->key_valid = 0;
        }
    }
    LEAVE();
    return 0;
}

API int32_t fpgasim_cu_model(int32_t card, int32_t cu, int32_t model, const char *error)
{
    int rc = 0;
    ENTER();
    struct card *c = card_at(card);
    if (c == NULL || cu < 0 || cu >= c->ncus) {
        rc = fail(EINVAL, "no such compute unit");
    } else {
        c->cus[cu].model = model;
        free(c->cus[cu].model_error);
        c->cus[cu].model_error = error ? strdup(error) : NULL;
    }
    LEAVE();
    return rc;
}

/* This process's CU contexts on cu: delta +1 (opened) or -1 (closed). */
API int32_t fpgasim_cu_contexts(int32_t card, int32_t cu, int32_t delta)
{
    int rc = 0;
    ENTER();
    struct card *c = card_at(card);
    if (c == NULL || cu < 0 || cu >= c->ncus)
        rc = fail(EINVAL, "no such compute unit");
    else
        c->cus[cu].contexts += delta;
    LEAVE();
    return rc;
}

/* Drop every card, buffer and command of this process (tests start afresh). */
API void fpgasim_forget(void)
{
    ENTER();
    for (int c = 0; c < FPGASIM_MAX_CARDS; c++) {
        if (cards[c].present)
            card_clear_cus(c);
        for (int i = 0; i < MAX_FAULTS; i++)
            free(cards[c].faults[i]);
        memset(&cards[c], 0, sizeof cards[c]);
    }
    for (uint32_t i = 0; i < buffers.n; i++) {
        struct buf *b = buffers.slot[i];
        if (b != NULL) {
            table_del(&buffers, b->id);
            buf_unmap(b);
        }
    }
    for (uint32_t i = 0; i < commands.n; i++) {
        struct cmd *x = commands.slot[i];
        if (x != NULL)
            cmd_free(x);
    }
    conc.executing = conc.peak = conc.wanted = conc.rendezvous_peak = 0;
    conc.state = 0;
    conc.timeout_s = DEFAULT_RENDEZVOUS_TIMEOUT_S;
    changed();
    pthread_cond_broadcast(&CV);
    LEAVE();
}

/* ------------------------------------------------------------------ the table the C double uses */
static const struct fpgasim_core core = {
    sizeof(struct fpgasim_core),
    0,
    fpgasim_meter_enter,
    fpgasim_meter_leave,
    fpgasim_last_error,
    fpgasim_bo_alloc,
    fpgasim_bo_free,
    fpgasim_dma,
    fpgasim_submit,
    fpgasim_cmd_state,
    fpgasim_cmd_release,
    fpgasim_wait,
};

API const struct fpgasim_core *fpgasim_core_table(void)
{
    return &core;
}
