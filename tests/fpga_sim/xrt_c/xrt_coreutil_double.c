/*
 * A test double of XRT's libxrt_coreutil.so.2 (its C API: xrt/xrt_device.h, xrt_bo.h,
 * xrt_kernel.h, unchanged from XRT 2.8 to master) over fpgaserve's simulated cards.
 *
 * Every sync, start, wait and buffer over user memory goes to the card core (card_core.c, the
 * simulated card's per-event rules, in C), through the table fpgasim_core_table gives: no Python
 * runs per event, and the blocking happens in the core without any lock or the GIL, as real XRT
 * blocks in ioctl/poll. The cold path (opening a card, loading an xclbin, CU contexts, closing)
 * is fpga_sim.card's, reached through fpga_sim.xrt_c_bridge, which registers a table of ctypes
 * callbacks here (fpgasim_register) the first time the library is used. Through ctypes.CDLL no
 * Python thread is held up; through ctypes.PyDLL the caller keeps the GIL while this sleeps, as
 * pyxrt's bindings do.
 *
 * A process without a Python interpreter (a native host program) gets one for that cold path:
 * the simulated card's loads and state files are Python, the host program and every event are
 * not. FPGASERVE_SIM_LIBPYTHON names the libpython to load, FPGASERVE_SIM_PYTHONPATH the folders
 * (os.pathsep-separated) to add as site directories (tests/, the venv's site-packages), and the
 * usual PYTHONHOME where the interpreter's standard library is.
 *
 * Handles are pointers to objects this library made, kept in a registry: anything else (a random
 * pointer, a closed handle, a handle of another kind) is refused with EINVAL and never
 * dereferenced. Objects are reference counted: a bo or kernel keeps its device's object, a run its
 * kernel (and with it the CU context, as XRT's shared pointers do), a run the bos set as its
 * arguments.
 *
 * Written for fpgaserve's tests; no XRT source is used.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "card_core.h"

#define API __attribute__((visibility("default")))

typedef unsigned char xuid_t[16];

enum ert_cmd_state {
    ERT_CMD_STATE_NEW = 1,
    ERT_CMD_STATE_QUEUED = 2,
    ERT_CMD_STATE_RUNNING = 3,
    ERT_CMD_STATE_COMPLETED = 4,
    ERT_CMD_STATE_ERROR = 5,
    ERT_CMD_STATE_ABORT = 6,
    ERT_CMD_STATE_SUBMITTED = 7,
    ERT_CMD_STATE_TIMEOUT = 8,
};

/* ------------------------------------------------------------------ the bridge (Python side) */
#define MAX_ARGS 64
#define MAX_CUS 64

enum arg_kind { ARG_INT = 0, ARG_FLOAT = 1, ARG_DOUBLE = 2, ARG_GLOBAL = 3 };

/* What the bridge's kernel_open fills in: the kernel's arguments as the xclbin lists them, and
 * for each of the kernel's CUs (in its order) the memory groups (bit g: GROUP_TOPOLOGY index g)
 * each argument is connected to, and its index in the card core; group[i]: what
 * xrtKernelArgGroupId answers for argument i (a property of the xclbin, fixed for the kernel's
 * life), -1 where the bridge answers (its error). Mirrored by fpga_sim.xrt_c_bridge.KernelInfo. */
struct kernel_info {
    int32_t nargs;
    int32_t ncus;
    uint32_t payload_size;
    int32_t card; /* the card core's card */
    int32_t offset[MAX_ARGS];
    int32_t size[MAX_ARGS];
    int32_t kind[MAX_ARGS];
    int32_t group[MAX_ARGS];
    int32_t cu[MAX_CUS]; /* the card core's index of the kernel's i-th CU */
    uint64_t conn[MAX_CUS][MAX_ARGS];
};

/* The cold path: every callback returns at once: ids > 0, 0, or -errno. Mirrored by
 * xrt_c_bridge.Table. */
struct bridge {
    int64_t (*dev_open)(int32_t index, const char *bdf, int64_t *out); /* out: core card, handle id */
    int32_t (*dev_close)(int64_t dev);
    int32_t (*dev_load)(int64_t dev, const char *path);
    int32_t (*dev_uuid)(int64_t dev, unsigned char *out);
    int64_t (*kernel_open)(int64_t dev, const unsigned char *uuid, const char *name, int32_t exclusive,
                           struct kernel_info *out);
    int32_t (*kernel_group)(int64_t kernel, int32_t argno);
    int32_t (*kernel_close)(int64_t kernel);
    /* XRT's copy of buffer bo (size bytes) into a bank argno of the kernel reaches: the copy's
     * core id; out: its group, its device address */
    int64_t (*bo_clone)(int64_t kernel, int32_t argno, uint64_t bo, uint64_t size, uint64_t *out);
    /* the card core (the same copy the card model drives) */
    const struct fpgasim_core *core;
};

static struct bridge B;
static int bridge_ready; /* set (under the GIL) by fpgasim_register */

/* The CPU time of every callback into the bridge (thread CPU, CLOCK_THREAD_CPUTIME_ID, taken
 * around the call: the ctypes trampoline and taking the GIL included), and how many; the card
 * core meters them as the card model's own CPU too (fpga_sim.card.stand_in_cpu_s). */
#define N_CALLBACKS (offsetof(struct bridge, core) / sizeof(void *))
static const struct fpgasim_core *C;
static uint64_t meter_ns[N_CALLBACKS], meter_calls[N_CALLBACKS];

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Not an XRT symbol: for each callback of struct bridge in its order (n of them at most), the
 * CPU ns spent in it and how many calls so far, as out[2 * i], out[2 * i + 1]; returns how many
 * callbacks there are. */
API int fpgasim_meter(uint64_t *out, int n)
{
    for (int i = 0; i < n && i < (int)N_CALLBACKS; i++) {
        out[2 * i] = __atomic_load_n(&meter_ns[i], __ATOMIC_RELAXED);
        out[2 * i + 1] = __atomic_load_n(&meter_calls[i], __ATOMIC_RELAXED);
    }
    return (int)N_CALLBACKS;
}

/* Every callback goes through this: B.fn(args...), its thread CPU metered. */
#define BRIDGE(fn, ...)                                                                             \
    ({                                                                                              \
        C->meter_enter();                                                                           \
        uint64_t t0_ = thread_cpu_ns();                                                             \
        __typeof__(B.fn(__VA_ARGS__)) r_ = B.fn(__VA_ARGS__);                                       \
        size_t i_ = offsetof(struct bridge, fn) / sizeof(void *);                                   \
        __atomic_add_fetch(&meter_ns[i_], thread_cpu_ns() - t0_, __ATOMIC_RELAXED);                 \
        __atomic_add_fetch(&meter_calls[i_], 1, __ATOMIC_RELAXED);                                  \
        C->meter_leave();                                                                           \
        r_;                                                                                         \
    })

/* Not an XRT symbol: how fpga_sim.xrt_c_bridge hands its callbacks (and the card core) in. */
API int fpgasim_register(const struct bridge *table, size_t size)
{
    if (table == NULL || size != sizeof(struct bridge) || table->core == NULL ||
        table->core->size != sizeof(struct fpgasim_core))
        return -EINVAL;
    memcpy(&B, table, sizeof B);
    C = B.core;
    __atomic_store_n(&bridge_ready, 1, __ATOMIC_RELEASE);
    return 0;
}

/* ------------------------------------------------------------------ blocking, and the GIL */
/* Every call of the library that can block (xrtBOSync, xrtRunWait, xrtRunWaitFor) is counted,
 * and those entered while the calling thread holds the GIL (PyGILState_Check: a caller through ctypes.PyDLL, or a binding that
 * does not release it) apart: a benchmark reads both to say whether the host's card calls
 * left the interpreter free, as a measurement, not an assumption. */
typedef int (*gil_check_fn)(void);
static gil_check_fn gil_check;
static uint64_t blocking_calls, blocking_calls_holding_gil;

API void fpgasim_blocking_counts(uint64_t out[2])
{
    out[0] = __atomic_load_n(&blocking_calls, __ATOMIC_RELAXED);
    out[1] = __atomic_load_n(&blocking_calls_holding_gil, __ATOMIC_RELAXED);
}

static void count_blocking(void)
{
    __atomic_add_fetch(&blocking_calls, 1, __ATOMIC_RELAXED);
    if (gil_check != NULL && gil_check())
        __atomic_add_fetch(&blocking_calls_holding_gil, 1, __ATOMIC_RELAXED);
}

/* The few CPython entry points needed to import the bridge, found in the process. */
typedef int (*gil_ensure_fn)(void);
typedef void (*gil_release_fn)(int);
typedef void *(*import_fn)(const char *);
typedef void *(*call_method_fn)(void *, const char *, const char *, ...);
typedef void (*decref_fn)(void *);
typedef void (*err_print_fn)(void);
typedef void (*initialize_fn)(int);
typedef int (*run_string_fn)(const char *);
typedef void *(*save_thread_fn)(void);

static pthread_once_t embed_once = PTHREAD_ONCE_INIT;

/* No interpreter in this process (a native host program): start one for the simulated card's
 * cold path, then let go of its GIL, so that every thread's callbacks can take it. */
static void embed_python(void)
{
    const char *path = getenv("FPGASERVE_SIM_LIBPYTHON");
    if (path == NULL || !*path) {
        fprintf(stderr, "[XRT] ERROR: simulated libxrt_coreutil: no Python interpreter in this process, and "
                        "FPGASERVE_SIM_LIBPYTHON does not name a libpython to run the simulated card's cold path "
                        "(loads, state files) in\n");
        return;
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (lib == NULL) {
        fprintf(stderr, "[XRT] ERROR: simulated libxrt_coreutil: cannot load %s: %s\n", path, dlerror());
        return;
    }
    initialize_fn initialize = (initialize_fn)dlsym(lib, "Py_InitializeEx");
    run_string_fn run = (run_string_fn)dlsym(lib, "PyRun_SimpleString");
    save_thread_fn save = (save_thread_fn)dlsym(lib, "PyEval_SaveThread");
    if (!initialize || !run || !save) {
        fprintf(stderr, "[XRT] ERROR: simulated libxrt_coreutil: %s is not a libpython\n", path);
        return;
    }
    initialize(0); /* 0: the host program keeps its signal handlers */
    run("import os, site\n"
        "for p in os.environ.get('FPGASERVE_SIM_PYTHONPATH', '').split(os.pathsep):\n"
        "    if p:\n"
        "        site.addsitedir(p)\n");
    save();
}

static int bridge_up(void)
{
    if (__atomic_load_n(&bridge_ready, __ATOMIC_ACQUIRE))
        return 1;
    if (dlsym(RTLD_DEFAULT, "PyGILState_Ensure") == NULL)
        pthread_once(&embed_once, embed_python);
    gil_ensure_fn ensure = (gil_ensure_fn)dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    gil_release_fn release = (gil_release_fn)dlsym(RTLD_DEFAULT, "PyGILState_Release");
    import_fn import = (import_fn)dlsym(RTLD_DEFAULT, "PyImport_ImportModule");
    call_method_fn call = (call_method_fn)dlsym(RTLD_DEFAULT, "PyObject_CallMethod");
    decref_fn decref = (decref_fn)dlsym(RTLD_DEFAULT, "Py_DecRef");
    err_print_fn err_print = (err_print_fn)dlsym(RTLD_DEFAULT, "PyErr_Print");
    gil_check = (gil_check_fn)dlsym(RTLD_DEFAULT, "PyGILState_Check");
    if (!ensure || !release || !import || !call || !decref || !err_print) {
        fprintf(stderr, "[XRT] ERROR: simulated libxrt_coreutil: no Python interpreter in this process "
                        "(the simulated card's cold path runs in one)\n");
        return 0;
    }
    Dl_info self;
    if (!dladdr((void *)&fpgasim_register, &self) || self.dli_fname == NULL)
        return 0;
    /* the GIL serializes first uses: the flag is set under it, by the bridge's attach() */
    int gil = ensure();
    if (!__atomic_load_n(&bridge_ready, __ATOMIC_ACQUIRE)) {
        void *module = import("fpga_sim.xrt_c_bridge");
        if (module == NULL) {
            err_print();
            fprintf(stderr, "[XRT] ERROR: simulated libxrt_coreutil: cannot import fpga_sim.xrt_c_bridge "
                            "(tests/ must be on sys.path)\n");
        } else {
            void *result = call(module, "attach", "s", self.dli_fname);
            if (result == NULL)
                err_print();
            else
                decref(result);
            decref(module);
        }
    }
    release(gil);
    return __atomic_load_n(&bridge_ready, __ATOMIC_ACQUIRE);
}

/* ------------------------------------------------------------------ handles */
enum kind { K_DEVICE = 0x44657631, K_BO = 0x426f3031, K_KERNEL = 0x4b726e31, K_RUN = 0x52756e31 };

struct hdr {
    uint32_t kind;
    int refs;
    int registered;
    struct hdr *next; /* registry chain */
};

struct device {
    struct hdr h;
    int64_t id;
    int32_t card;   /* the card core's card */
    int64_t handle; /* the card handle its buffers belong to */
};

struct bo {
    struct hdr h;
    struct device *dev;
    uint64_t id; /* the card core's buffer */
    uint64_t size;
    uint64_t address;
    unsigned char *host; /* NULL: device only */
    uint32_t grp;
};

struct kernel {
    struct hdr h;
    struct device *dev;
    int64_t id;
    struct kernel_info info;
};

struct run {
    struct hdr h;
    struct kernel *k;
    unsigned char *payload;
    uint64_t cus; /* the kernel's CUs (bit i: its i-th) this run may start on */
    struct bo *args[MAX_ARGS];
    uint64_t cmd; /* the card core's command of the last start (a reference held) */
};

#define BUCKETS 4096
static struct hdr *registry[BUCKETS];
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t bucket(const void *p)
{
    return (size_t)((((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull) >> 52) % BUCKETS;
}

static void reg_add(struct hdr *h)
{
    pthread_mutex_lock(&registry_lock);
    size_t b = bucket(h);
    h->next = registry[b];
    registry[b] = h;
    h->registered = 1;
    pthread_mutex_unlock(&registry_lock);
}

/* Drop h from the registry; 1 if it was there (the caller owns that reference now). */
static int reg_del_locked(struct hdr *h)
{
    struct hdr **at = &registry[bucket(h)];
    for (; *at != NULL; at = &(*at)->next) {
        if (*at == h) {
            *at = h->next;
            h->next = NULL;
            h->registered = 0;
            return 1;
        }
    }
    return 0;
}

/* The live object of that kind at p, with a reference taken; NULL otherwise. p itself is only
 * compared, never read, until it is found in the registry. */
static void *acquire(const void *p, uint32_t kind)
{
    struct hdr *found = NULL;
    if (p == NULL)
        return NULL;
    pthread_mutex_lock(&registry_lock);
    for (struct hdr *h = registry[bucket(p)]; h != NULL; h = h->next) {
        if ((const void *)h == p) {
            if (h->kind == kind) {
                h->refs++;
                found = h;
            }
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    return found;
}

/* A closing call: take the object out of the registry (later uses are refused). */
static void *unregister(const void *p, uint32_t kind)
{
    struct hdr *found = NULL;
    if (p == NULL)
        return NULL;
    pthread_mutex_lock(&registry_lock);
    for (struct hdr *h = registry[bucket(p)]; h != NULL; h = h->next) {
        if ((const void *)h == p) {
            if (h->kind == kind && reg_del_locked(h))
                found = h;
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    return found;
}

static void take(struct hdr *h)
{
    pthread_mutex_lock(&registry_lock);
    h->refs++;
    pthread_mutex_unlock(&registry_lock);
}

static void destroy(struct hdr *h);

static void drop(void *p)
{
    struct hdr *h = p;
    if (h == NULL)
        return;
    pthread_mutex_lock(&registry_lock);
    int last = --h->refs == 0;
    pthread_mutex_unlock(&registry_lock);
    if (last) {
        int saved = errno; /* the caller's error survives the teardown */
        destroy(h);        /* outside the lock: it calls into the card model */
        errno = saved;
    }
}

static void destroy(struct hdr *h)
{
    switch (h->kind) {
    case K_DEVICE:
        break; /* the card handle was closed by xrtDeviceClose */
    case K_BO: {
        struct bo *b = (struct bo *)h;
        C->bo_free(b->id);
        drop(b->dev);
        break;
    }
    case K_KERNEL: {
        struct kernel *k = (struct kernel *)h;
        BRIDGE(kernel_close, k->id); /* the CU context: the driver's teardown */
        drop(k->dev);
        break;
    }
    case K_RUN: {
        struct run *r = (struct run *)h;
        if (r->cmd)
            C->cmd_release(r->cmd);
        for (int i = 0; i < MAX_ARGS; i++)
            drop(r->args[i]);
        free(r->payload);
        drop(r->k);
        break;
    }
    }
    h->kind = 0;
    free(h);
}

static void *make(size_t size, uint32_t kind)
{
    struct hdr *h = calloc(1, size);
    if (h == NULL)
        return NULL;
    h->kind = kind;
    h->refs = 1; /* the handle's own reference, dropped by its close */
    return h;
}

/* ------------------------------------------------------------------ errors */
static int fail(int err)
{
    errno = err;
    return -1;
}

static void *fail_null(int err)
{
    errno = err;
    return NULL;
}

/* A bridge result: >= 0 as it is, -errno -> errno. */
static int check(int64_t rc)
{
    if (rc < 0) {
        errno = (int)-rc;
        return -1;
    }
    return 0;
}

/* A card core result: >= 0 as it is; else XRT's message printed, -errno -> errno (a simulator
 * error, which no card would return, is EIO). */
static int core_check(int64_t rc)
{
    if (rc >= 0)
        return 0;
    int err = rc == -FPGASIM_ESIM ? EIO : (int)-rc;
    if (rc == -FPGASIM_ESIM)
        fprintf(stderr, "[XRT] ERROR: simulated card: %s\n", C->last_error());
    else
        fprintf(stderr, "[XRT] ERROR: %s: %s\n", C->last_error(), strerror(err));
    errno = err;
    return -1;
}

/* ------------------------------------------------------------------ xrt_device.h */
static void *device_open(int index, const char *bdf)
{
    if (!bridge_up())
        return fail_null(ENOSYS);
    int64_t out[2] = {0, 0};
    int64_t id = BRIDGE(dev_open, index, bdf, out);
    if (id <= 0)
        return fail_null(id < 0 ? (int)-id : EINVAL);
    struct device *d = make(sizeof *d, K_DEVICE);
    if (d == NULL) {
        BRIDGE(dev_close, id);
        return fail_null(ENOMEM);
    }
    d->id = id;
    d->card = (int32_t)out[0];
    d->handle = out[1];
    reg_add(&d->h);
    return d;
}

API void *xrtDeviceOpen(unsigned int index)
{
    if (index > 0x7fffffffu)
        return fail_null(ENODEV);
    return device_open((int)index, NULL);
}

API void *xrtDeviceOpenByBDF(const char *bdf)
{
    if (bdf == NULL)
        return fail_null(EINVAL);
    return device_open(-1, bdf);
}

API int xrtDeviceClose(void *dhdl)
{
    struct device *d = unregister(dhdl, K_DEVICE);
    if (d == NULL)
        return fail(EINVAL);
    /* as the process's exit would: contexts closed, buffers freed (objects still held by kernels,
     * bos and runs stay until they are closed, and fail on the card from now on) */
    int64_t rc = BRIDGE(dev_close, d->id);
    drop(d);
    return check(rc);
}

API int xrtDeviceLoadXclbinFile(void *dhdl, const char *path)
{
    if (path == NULL)
        return fail(EINVAL);
    struct device *d = acquire(dhdl, K_DEVICE);
    if (d == NULL)
        return fail(EINVAL);
    int64_t rc = BRIDGE(dev_load, d->id, path);
    drop(d);
    return check(rc);
}

API int xrtDeviceGetXclbinUUID(void *dhdl, xuid_t out)
{
    if (out == NULL)
        return fail(EINVAL);
    struct device *d = acquire(dhdl, K_DEVICE);
    if (d == NULL)
        return fail(EINVAL);
    int64_t rc = BRIDGE(dev_uuid, d->id, out);
    drop(d);
    return check(rc);
}

/* ------------------------------------------------------------------ xrt_bo.h */
#define XRT_BO_FLAGS_DEV_ONLY (1ull << 28)
/* buffer kinds whose memory the driver provides elsewhere: not modelled (EINVAL, as pyxrt's stand-in) */
#define UNMODELLED_FLAGS ((1ull << 27) | (1ull << 29) | (1ull << 30)) /* SVM, HOST_ONLY, P2P */

static void *bo_alloc(void *dhdl, void *userptr, size_t size, uint64_t flags, uint32_t grp)
{
    struct device *d = acquire(dhdl, K_DEVICE);
    if (d == NULL)
        return fail_null(EINVAL);
    if (userptr != NULL && (uintptr_t)userptr % 4096) {
        /* xrt::bo's userptr constructor checks this before the driver does */
        fprintf(stderr, "[XRT] ERROR: userptr is not aligned: %s\n", strerror(EINVAL));
        drop(d);
        return fail_null(EINVAL);
    }
    if (userptr == NULL && (flags & UNMODELLED_FLAGS)) {
        fprintf(stderr, "[XRT] ERROR: failed to allocate bo: %s\n", strerror(EINVAL));
        drop(d);
        return fail_null(EINVAL);
    }
    struct bo *b = make(sizeof *b, K_BO);
    if (b == NULL) {
        drop(d);
        return fail_null(ENOMEM);
    }
    uint64_t out[3] = {0, 0, 0};
    int32_t kind = userptr != NULL ? FPGASIM_BO_USERPTR : (flags & XRT_BO_FLAGS_DEV_ONLY) ? FPGASIM_BO_DEVICE_ONLY : 0;
    int64_t id = C->bo_alloc(d->card, d->handle, size, (int32_t)(grp & 0xffff), kind, userptr, out);
    if (core_check(id) < 0) {
        int err = errno;
        free(b);
        drop(d);
        return fail_null(err);
    }
    b->dev = d; /* keeps the reference taken above */
    b->id = out[0];
    b->size = size;
    b->host = (unsigned char *)(uintptr_t)out[2];
    b->address = out[1];
    b->grp = grp & 0xffff;
    reg_add(&b->h);
    return b;
}

API void *xrtBOAlloc(void *dhdl, size_t size, uint64_t flags, uint32_t grp)
{
    return bo_alloc(dhdl, NULL, size, flags, grp);
}

API void *xrtBOAllocUserPtr(void *dhdl, void *userptr, size_t size, uint64_t flags, uint32_t grp)
{
    if (userptr == NULL)
        return fail_null(EINVAL);
    return bo_alloc(dhdl, userptr, size, flags, grp);
}

API int xrtBOFree(void *bhdl)
{
    struct bo *b = unregister(bhdl, K_BO);
    if (b == NULL)
        return fail(EINVAL);
    drop(b); /* freed on the card once no run holds it as an argument */
    return 0;
}

API void *xrtBOMap(void *bhdl)
{
    struct bo *b = acquire(bhdl, K_BO);
    if (b == NULL)
        return fail_null(EINVAL);
    void *host = b->host;
    drop(b);
    return host != NULL ? host : fail_null(EINVAL); /* device-only: no host buffer */
}

API size_t xrtBOSize(void *bhdl)
{
    struct bo *b = acquire(bhdl, K_BO);
    if (b == NULL) {
        errno = EINVAL;
        return SIZE_MAX;
    }
    size_t size = b->size;
    drop(b);
    return size;
}

API uint64_t xrtBOAddress(void *bhdl)
{
    struct bo *b = acquire(bhdl, K_BO);
    if (b == NULL) {
        errno = EINVAL;
        return UINT64_MAX;
    }
    uint64_t address = b->address;
    drop(b);
    return address;
}

static int bo_copy(void *bhdl, void *dst, const void *src, size_t size, size_t offset, int writing)
{
    if ((writing ? src : dst) == NULL && size)
        return fail(EINVAL);
    struct bo *b = acquire(bhdl, K_BO);
    if (b == NULL)
        return fail(EINVAL);
    int rc = 0;
    if (b->host == NULL || offset > b->size || size > b->size - offset)
        rc = fail(EINVAL); /* no host buffer; "attempting to write/read past buffer size" */
    else if (writing)
        memcpy(b->host + offset, src, size);
    else
        memcpy(dst, b->host + offset, size);
    drop(b);
    return rc;
}

API int xrtBOWrite(void *bhdl, const void *src, size_t size, size_t seek)
{
    return bo_copy(bhdl, NULL, src, size, seek, 1);
}

API int xrtBORead(void *bhdl, void *dst, size_t size, size_t skip)
{
    return bo_copy(bhdl, dst, NULL, size, skip, 0);
}

API int xrtBOSync(void *bhdl, int dir, size_t size, size_t offset)
{
    count_blocking();
    struct bo *b = acquire(bhdl, K_BO);
    if (b == NULL)
        return fail(EINVAL);
    int rc = 0;
    if (dir == 2 || dir == 3) {
        /* AIE GMIO directions: nothing on an Alveo PL design */
    } else if (dir != 0 && dir != 1) {
        fprintf(stderr, "[XRT] ERROR: invalid sync direction: %s\n", strerror(EINVAL));
        rc = fail(EINVAL);
    } else if (offset > b->size || size > b->size - offset) {
        /* xclSyncBO returns -EINVAL, which XRT 2.17's buffer_object::sync ignores */
    } else {
        /* the modelled transfer: the core blocks until its end, without the GIL */
        rc = core_check(C->dma(b->id, offset, size, dir == 0));
    }
    drop(b);
    return rc;
}

/* ------------------------------------------------------------------ xrt_kernel.h */
static void *kernel_open(void *dhdl, const unsigned char *uuid, const char *name, int exclusive)
{
    if (uuid == NULL || name == NULL)
        return fail_null(EINVAL);
    struct device *d = acquire(dhdl, K_DEVICE);
    if (d == NULL)
        return fail_null(EINVAL);
    struct kernel *k = make(sizeof *k, K_KERNEL);
    if (k == NULL) {
        drop(d);
        return fail_null(ENOMEM);
    }
    int64_t id = BRIDGE(kernel_open, d->id, uuid, name, exclusive, &k->info);
    if (id <= 0) {
        free(k);
        drop(d);
        return fail_null(id < 0 ? (int)-id : EINVAL);
    }
    k->dev = d;
    k->id = id;
    reg_add(&k->h);
    return k;
}

API void *xrtPLKernelOpen(void *dhdl, const xuid_t xclbin_id, const char *name)
{
    return kernel_open(dhdl, xclbin_id, name, 0);
}

API void *xrtPLKernelOpenExclusive(void *dhdl, const xuid_t xclbin_id, const char *name)
{
    return kernel_open(dhdl, xclbin_id, name, 1);
}

API int xrtKernelArgGroupId(void *khdl, int argno)
{
    struct kernel *k = acquire(khdl, K_KERNEL);
    if (k == NULL)
        return fail(EINVAL);
    int32_t rc;
    if (argno >= 0 && argno < MAX_ARGS && k->info.group[argno] >= 0)
        rc = k->info.group[argno]; /* fixed by the xclbin: the bridge said so at kernel_open */
    else
        rc = BRIDGE(kernel_group, k->id, argno);
    drop(k);
    return rc < 0 ? fail(-rc) : rc;
}

API int xrtKernelClose(void *khdl)
{
    struct kernel *k = unregister(khdl, K_KERNEL);
    if (k == NULL)
        return fail(EINVAL);
    drop(k); /* its CU context closes once its runs are closed too */
    return 0;
}

API void *xrtRunOpen(void *khdl)
{
    struct kernel *k = acquire(khdl, K_KERNEL);
    if (k == NULL)
        return fail_null(EINVAL);
    struct run *r = make(sizeof *r, K_RUN);
    unsigned char *payload = calloc(1, k->info.payload_size ? k->info.payload_size : 1);
    if (r == NULL || payload == NULL) {
        free(r);
        free(payload);
        drop(k);
        return fail_null(ENOMEM);
    }
    r->k = k;
    r->payload = payload;
    r->cus = k->info.ncus >= 64 ? ~0ull : ((1ull << k->info.ncus) - 1);
    reg_add(&r->h);
    return r;
}

/* run_impl::validate_bo_at_index: keep the CUs whose argument is connected to the bo's group;
 * with none left, XRT runs on a copy of the buffer in a connected bank (the bridge makes it). */
static struct bo *connected_bo(struct run *r, int index, struct bo *b)
{
    const struct kernel_info *ki = &r->k->info;
    if (b->grp >= 64)
        return b; /* not modelled: groups past 64 are taken as connected */
    uint64_t keep = 0;
    for (int cu = 0; cu < ki->ncus && cu < MAX_CUS; cu++)
        if ((r->cus >> cu & 1) && (ki->conn[cu][index] >> b->grp & 1))
            keep |= 1ull << cu;
    if (keep) {
        r->cus = keep;
        return b;
    }
    struct bo *clone = make(sizeof *clone, K_BO);
    if (clone == NULL)
        return NULL;
    uint64_t out[2] = {0, 0};
    int64_t id = BRIDGE(bo_clone, r->k->id, index, b->id, b->size, out);
    if (id <= 0) {
        free(clone);
        errno = id < 0 ? (int)-id : EINVAL;
        return NULL;
    }
    take(&b->dev->h);
    clone->dev = b->dev;
    clone->id = (uint64_t)id;
    clone->size = b->size;
    clone->address = out[1];
    clone->grp = (uint32_t)out[0];
    return clone; /* not registered (no user handle): only this run holds it */
}

API int xrtRunSetArg(void *rhdl, int index, ...)
{
    struct run *r = acquire(rhdl, K_RUN);
    if (r == NULL)
        return fail(EINVAL);
    const struct kernel_info *ki = &r->k->info;
    if (index < 0 || index >= ki->nargs) {
        drop(r);
        /* XRT: std::out_of_range from the argument vector, caught as a std::exception: its
         * message logged, -1 returned, errno left as it was (xrt_kernel.cpp, every release) */
        fprintf(stderr, "[XRT] ERROR: vector::_M_range_check: __n (which is %d) >= this->size() (which is %d)\n",
                index, ki->nargs);
        return -1;
    }
    unsigned char *at = r->payload + ki->offset[index];
    size_t room = (size_t)ki->size[index];
    int rc = 0;
    va_list ap;
    va_start(ap, index);
    switch (ki->kind[index]) {
    case ARG_GLOBAL: {
        void *handle = va_arg(ap, void *);
        struct bo *b = acquire(handle, K_BO);
        if (b == NULL) {
            rc = fail(EINVAL);
            break;
        }
        struct bo *used = connected_bo(r, index, b);
        if (used == NULL) {
            rc = -1;
            drop(b);
            break;
        }
        if (used != b)
            drop(b);
        uint64_t address = used->address;
        memcpy(at, &address, room < 8 ? room : 8);
        struct bo *old = r->args[index];
        r->args[index] = used; /* XRT binds the bo to the run: kept until replaced or closed */
        drop(old);
        break;
    }
    case ARG_FLOAT: {
        float value = (float)va_arg(ap, double); /* promoted through ... */
        memcpy(at, &value, room < 4 ? room : 4);
        break;
    }
    case ARG_DOUBLE: {
        double value = va_arg(ap, double);
        memcpy(at, &value, room < 8 ? room : 8);
        break;
    }
    default:
        if (room > 4) {
            uint64_t value = va_arg(ap, uint64_t);
            memcpy(at, &value, room < 8 ? room : 8);
        } else {
            uint32_t value = (uint32_t)va_arg(ap, int);
            memcpy(at, &value, room);
        }
        break;
    }
    va_end(ap);
    drop(r);
    return rc;
}

API int xrtRunStart(void *rhdl)
{
    struct run *r = acquire(rhdl, K_RUN);
    if (r == NULL)
        return fail(EINVAL);
    const struct kernel_info *ki = &r->k->info;
    int rc = 0;
    if (r->cmd && C->cmd_state(r->cmd) == ERT_CMD_STATE_NEW) {
        /* XRT: kernel_command::run throws std::runtime_error, caught as a std::exception: the
         * message logged, -1 returned, errno left as it was (xrt_kernel.cpp, every release) */
        fprintf(stderr, "[XRT] ERROR: bad command state, can't launch\n");
        rc = -1;
    } else {
        int32_t cus[MAX_CUS];
        int32_t n = 0;
        for (int i = 0; i < ki->ncus && i < MAX_CUS; i++)
            if (r->cus >> i & 1)
                cus[n++] = ki->cu[i];
        int64_t cmd = C->submit(ki->card, cus, n, r->payload, ki->payload_size, 1, NULL);
        rc = core_check(cmd);
        if (rc == 0) {
            if (r->cmd)
                C->cmd_release(r->cmd);
            r->cmd = (uint64_t)cmd;
        }
    }
    drop(r);
    return rc;
}

/* Wait for the run's command: until done, or timeout_s passes (<= 0: no limit). */
static int run_wait(void *rhdl, double timeout_s)
{
    struct run *r = acquire(rhdl, K_RUN);
    if (r == NULL) {
        errno = EINVAL;
        return ERT_CMD_STATE_ABORT;
    }
    int state = ERT_CMD_STATE_NEW;
    if (r->cmd) {
        int32_t done = C->wait(&r->cmd, 1, timeout_s > 0 ? timeout_s : -1.0); /* without the GIL */
        if (done < 0) {
            errno = -done;
            state = ERT_CMD_STATE_ABORT;
        } else if (done == 0) {
            state = ERT_CMD_STATE_TIMEOUT;
        } else {
            int32_t s = C->cmd_state(r->cmd);
            state = s < 0 ? ERT_CMD_STATE_ABORT : s;
        }
    }
    drop(r);
    return state;
}

API int xrtRunWait(void *rhdl)
{
    count_blocking();
    return run_wait(rhdl, 0.0);
}

API int xrtRunWaitFor(void *rhdl, unsigned int timeout_ms)
{
    count_blocking();
    return run_wait(rhdl, timeout_ms ? timeout_ms / 1000.0 : 0.0);
}

API int xrtRunState(void *rhdl)
{
    struct run *r = acquire(rhdl, K_RUN);
    if (r == NULL) {
        errno = EINVAL;
        return ERT_CMD_STATE_ABORT;
    }
    int state = ERT_CMD_STATE_NEW;
    if (r->cmd) {
        int32_t rc = C->cmd_state(r->cmd);
        if (rc < 0) {
            errno = -rc;
            state = ERT_CMD_STATE_ABORT;
        } else {
            state = rc;
        }
    }
    drop(r);
    return state;
}

API int xrtRunClose(void *rhdl)
{
    struct run *r = unregister(rhdl, K_RUN);
    if (r == NULL)
        return fail(EINVAL);
    drop(r);
    return 0;
}
