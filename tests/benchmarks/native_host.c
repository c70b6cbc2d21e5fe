/*
 * A native host program for hls4ml kernels on Alveo cards: the reference a server is measured
 * against (no server, no network, no Python of its own). It drives libxrt_coreutil.so.2 (XRT's
 * C API: xrt_device.h, xrt_bo.h, xrt_kernel.h) the way fastmachinelearning/nrp_u55c_benchmark's
 * host drives its card through OpenCL: N compute units, B buffer slots per CU, each slot an
 * input and an output buffer in its CU's bank and a run whose arguments are set once; a thread
 * per slot keeps one event in flight on it (sync in, start, wait, sync out), so N x B events are
 * in flight at once and PCIe transfers overlap kernels.
 *
 *   native_host XCLBIN KERNEL CUS BUFFERS ROWS N_IN N_OUT SECONDS [--copy] [--out FILE]
 *
 * KERNEL is the ABI: kernel_wrapper (hls4ml VitisAccelerator: batchsize, in, out; float32
 * elements, built with HW_Quant) or krnl_rtl (hls4ml VivadoAccelerator: in, out, length_r_in,
 * length_r_out; float32 words). CUS compute units named <kernel>_1 .. <kernel>_CUS. Every event
 * is ROWS rows of N_IN float32 features; --copy copies the event into the slot's input buffer
 * first (nrp's host memcpy; by default the slot's input is written once, as a server reading a
 * client's shared memory in place does). --out writes the outputs of one event (the first slot's,
 * after the run) to FILE. The last line is
 *
 *   native_host: events=E seconds=S events_per_s=R cpu_us_per_event=C cus=N buffers=B
 *
 * with the process's CPU (every thread) per event over the measured window; against the
 * simulated card (FPGASERVE_SIM_CORE_LIBRARY set) it also says card_model_us_per_event and
 * blocked_us_per_event, the card model's own share. Build: cc -O2 -pthread native_host.c
 * -L$XILINX_XRT/lib -l:libxrt_coreutil.so.2 -Wl,-rpath,$XILINX_XRT/lib -ldl.
 *
 * Written for fpgaserve's benchmarks (tests/benchmarks/bench_card.py).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* XRT's C API, as its headers declare it (handles are opaque pointers) */
typedef void *xrtDeviceHandle;
typedef void *xrtBufferHandle;
typedef void *xrtKernelHandle;
typedef void *xrtRunHandle;
typedef unsigned char xuid_t[16];
xrtDeviceHandle xrtDeviceOpen(unsigned int index);
int xrtDeviceClose(xrtDeviceHandle dhdl);
int xrtDeviceLoadXclbinFile(xrtDeviceHandle dhdl, const char *path);
int xrtDeviceGetXclbinUUID(xrtDeviceHandle dhdl, xuid_t out);
xrtBufferHandle xrtBOAlloc(xrtDeviceHandle dhdl, size_t size, uint64_t flags, uint32_t grp);
int xrtBOFree(xrtBufferHandle bhdl);
void *xrtBOMap(xrtBufferHandle bhdl);
int xrtBOSync(xrtBufferHandle bhdl, int dir, size_t size, size_t offset);
xrtKernelHandle xrtPLKernelOpen(xrtDeviceHandle dhdl, const xuid_t xclbin_uuid, const char *name);
int xrtKernelArgGroupId(xrtKernelHandle khdl, int argno);
int xrtKernelClose(xrtKernelHandle khdl);
xrtRunHandle xrtRunOpen(xrtKernelHandle khdl);
int xrtRunSetArg(xrtRunHandle rhdl, int index, ...);
int xrtRunStart(xrtRunHandle rhdl);
int xrtRunWaitFor(xrtRunHandle rhdl, unsigned int timeout_ms);
int xrtRunClose(xrtRunHandle rhdl);

#define TO_DEVICE 0
#define FROM_DEVICE 1
#define COMPLETED 4
#define MAX_SLOTS 256

struct slot {
    int cu;
    xrtBufferHandle in, out;
    xrtRunHandle run;
    pthread_t thread;
    uint64_t events;
    int failed;
};

static struct {
    int krnl_rtl, copy;
    size_t in_bytes, out_bytes;
    float *event;
    double start, stop;
    volatile int go;
} cfg;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double process_cpu_s(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)r.ru_utime.tv_sec + r.ru_utime.tv_usec * 1e-6 + (double)r.ru_stime.tv_sec +
           r.ru_stime.tv_usec * 1e-6;
}

static int die(const char *what)
{
    fprintf(stderr, "native_host: %s failed (errno %d: %s)\n", what, errno, strerror(errno));
    exit(2);
}

/* One event on the slot: its input to the card, the kernel, its output back. */
static int event(struct slot *s)
{
    if (cfg.copy)
        memcpy(xrtBOMap(s->in), cfg.event, cfg.in_bytes);
    if (xrtBOSync(s->in, TO_DEVICE, cfg.in_bytes, 0) != 0)
        return -1;
    if (xrtRunStart(s->run) != 0)
        return -1;
    if (xrtRunWaitFor(s->run, 10000) != COMPLETED)
        return -1;
    return xrtBOSync(s->out, FROM_DEVICE, cfg.out_bytes, 0);
}

static void *worker(void *arg)
{
    struct slot *s = arg;
    while (!__atomic_load_n(&cfg.go, __ATOMIC_ACQUIRE)) {
        struct timespec t = {0, 100000};
        nanosleep(&t, NULL);
    }
    while (now_s() < cfg.stop) {
        if (event(s) != 0) {
            s->failed = 1;
            break;
        }
        if (now_s() >= cfg.start) /* the first events (warm-up) are not counted */
            s->events++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 9) {
        fprintf(stderr, "usage: %s XCLBIN KERNEL CUS BUFFERS ROWS N_IN N_OUT SECONDS [--copy] [--out FILE]\n",
                argv[0]);
        return 1;
    }
    const char *xclbin = argv[1], *kernel = argv[2], *out_file = NULL;
    int cus = atoi(argv[3]), buffers = atoi(argv[4]);
    long rows = atol(argv[5]), n_in = atol(argv[6]), n_out = atol(argv[7]);
    double seconds = atof(argv[8]);
    for (int i = 9; i < argc; i++) {
        if (!strcmp(argv[i], "--copy"))
            cfg.copy = 1;
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out_file = argv[++i];
    }
    int nslots = cus * buffers;
    if (cus < 1 || buffers < 1 || nslots > MAX_SLOTS || rows < 1 || n_in < 1 || n_out < 1 || seconds <= 0) {
        fprintf(stderr, "native_host: CUS, BUFFERS, ROWS, N_IN, N_OUT and SECONDS must be positive (%d slots at most)\n",
                MAX_SLOTS);
        return 1;
    }
    cfg.krnl_rtl = !strcmp(kernel, "krnl_rtl");
    if (!cfg.krnl_rtl && strcmp(kernel, "kernel_wrapper")) {
        fprintf(stderr, "native_host: KERNEL must be kernel_wrapper or krnl_rtl\n");
        return 1;
    }
    cfg.in_bytes = (size_t)rows * (size_t)n_in * 4;
    cfg.out_bytes = (size_t)rows * (size_t)n_out * 4;
    cfg.event = malloc(cfg.in_bytes);
    if (cfg.event == NULL)
        die("malloc");
    uint32_t seed = 12345;
    for (size_t i = 0; i < cfg.in_bytes / 4; i++) { /* unit-normal-ish features, fixed seed */
        seed = seed * 1664525u + 1013904223u;
        cfg.event[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 4.0f;
    }

    xrtDeviceHandle dev = xrtDeviceOpen(0);
    if (dev == NULL)
        die("xrtDeviceOpen(0)");
    if (xrtDeviceLoadXclbinFile(dev, xclbin) != 0)
        die("xrtDeviceLoadXclbinFile");
    xuid_t uuid;
    if (xrtDeviceGetXclbinUUID(dev, uuid) != 0)
        die("xrtDeviceGetXclbinUUID");
    xrtKernelHandle kernels[64];
    for (int c = 0; c < cus; c++) {
        char name[256];
        snprintf(name, sizeof name, "%s:{%s_%d}", kernel, kernel, c + 1);
        kernels[c] = xrtPLKernelOpen(dev, uuid, name);
        if (kernels[c] == NULL)
            die(name);
    }
    int arg_in = cfg.krnl_rtl ? 0 : 1, arg_out = cfg.krnl_rtl ? 1 : 2;
    struct slot slots[MAX_SLOTS];
    memset(slots, 0, sizeof slots);
    for (int i = 0; i < nslots; i++) {
        struct slot *s = &slots[i];
        s->cu = i % cus; /* slot i on CU i mod N: the CUs fill evenly */
        xrtKernelHandle k = kernels[s->cu];
        s->in = xrtBOAlloc(dev, cfg.in_bytes, 0, (uint32_t)xrtKernelArgGroupId(k, arg_in));
        s->out = xrtBOAlloc(dev, cfg.out_bytes, 0, (uint32_t)xrtKernelArgGroupId(k, arg_out));
        if (s->in == NULL || s->out == NULL)
            die("xrtBOAlloc");
        memcpy(xrtBOMap(s->in), cfg.event, cfg.in_bytes);
        s->run = xrtRunOpen(k);
        if (s->run == NULL)
            die("xrtRunOpen");
        int rc;
        if (cfg.krnl_rtl)
            rc = xrtRunSetArg(s->run, 0, s->in) | xrtRunSetArg(s->run, 1, s->out) |
                 xrtRunSetArg(s->run, 2, (unsigned int)(rows * n_in)) |
                 xrtRunSetArg(s->run, 3, (unsigned int)(rows * n_out));
        else
            rc = xrtRunSetArg(s->run, 0, (unsigned int)rows) | xrtRunSetArg(s->run, 1, s->in) |
                 xrtRunSetArg(s->run, 2, s->out);
        if (rc != 0)
            die("xrtRunSetArg");
    }

    /* the simulated card's own CPU, where the program runs against it */
    void (*card_cpu)(uint64_t[3]) = NULL;
    const char *core = getenv("FPGASERVE_SIM_CORE_LIBRARY");
    if (core != NULL && *core) {
        void *h = dlopen(core, RTLD_NOW | RTLD_NOLOAD);
        if (h != NULL)
            card_cpu = (void (*)(uint64_t[3]))dlsym(h, "fpgasim_cpu");
    }
    double warmup = seconds * 0.1 < 0.5 ? seconds * 0.1 : 0.5;
    double t0 = now_s();
    cfg.start = t0 + warmup;
    cfg.stop = cfg.start + seconds;
    for (int i = 0; i < nslots; i++)
        if (pthread_create(&slots[i].thread, NULL, worker, &slots[i]) != 0)
            die("pthread_create");
    __atomic_store_n(&cfg.go, 1, __ATOMIC_RELEASE);
    struct timespec w = {0, 0};
    double wait = cfg.start - now_s();
    if (wait > 0) {
        w.tv_sec = (time_t)wait;
        w.tv_nsec = (long)((wait - (double)w.tv_sec) * 1e9);
        nanosleep(&w, NULL);
    }
    double cpu0 = process_cpu_s(), m0 = now_s();
    uint64_t c0[3] = {0, 0, 0}, c1[3] = {0, 0, 0};
    if (card_cpu)
        card_cpu(c0);
    uint64_t events = 0;
    int failed = 0;
    for (int i = 0; i < nslots; i++) {
        pthread_join(slots[i].thread, NULL);
        events += slots[i].events;
        failed |= slots[i].failed;
    }
    double m1 = now_s(), cpu1 = process_cpu_s();
    if (card_cpu)
        card_cpu(c1);
    if (failed) {
        fprintf(stderr, "native_host: an event failed (errno %d: %s)\n", errno, strerror(errno));
        return 2;
    }
    if (out_file != NULL) {
        if (event(&slots[0]) != 0)
            die("the event for --out");
        FILE *f = fopen(out_file, "wb");
        if (f == NULL || fwrite(xrtBOMap(slots[0].out), 1, cfg.out_bytes, f) != cfg.out_bytes)
            die(out_file);
        fclose(f);
    }
    for (int i = 0; i < nslots; i++) {
        xrtRunClose(slots[i].run);
        xrtBOFree(slots[i].in);
        xrtBOFree(slots[i].out);
    }
    for (int c = 0; c < cus; c++)
        xrtKernelClose(kernels[c]);
    xrtDeviceClose(dev);
    double span = m1 - m0;
    double n = events ? (double)events : 1.0;
    printf("native_host: events=%llu seconds=%.3f events_per_s=%.1f cpu_us_per_event=%.1f cus=%d buffers=%d",
           (unsigned long long)events, span, events / span, (cpu1 - cpu0) / n * 1e6, cus, buffers);
    if (card_cpu)
        printf(" card_model_us_per_event=%.1f blocked_us_per_event=%.1f", (double)(c1[0] - c0[0]) / n * 1e-3,
               (double)(c1[1] - c0[1]) / n * 1e-3);
    printf("\n");
    return 0;
}
