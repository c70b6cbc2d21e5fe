/*
 * The simulated card's per-event rules, in C (card_core.c, built into libfpgasim_card.so):
 * the DMA channels' timeline, each compute unit's command queue and ERT states, kernel timing,
 * the checks of every start (lengths, buffers inside allocations, banks a CU's ports reach),
 * completion, device memory and the kernels' computation (hls4ml's C-simulation, called from
 * here). One copy per process: fpga_sim/card.py loads it (its cold path: xclbin loads and
 * their refusals, contexts, resets, hang control files' state, telemetry, state files), the
 * test-only pyxrt and the PYNQ plug-in reach it through card.py (ctypes), and the C double of
 * libxrt_coreutil.so.2 calls it directly through struct fpgasim_core (no Python per event).
 *
 * Conventions: every function returns >= 0 on success and -errno on failure (-FPGASIM_ESIM: a
 * simulator error, not a card error); fpgasim_last_error() is the text of the calling thread's
 * last failure. Times are CLOCK_MONOTONIC seconds (Python's time.monotonic()). Layouts here are
 * mirrored by fpga_sim/card_core.py (ctypes).
 *
 * Written for fpgaserve's tests; no XRT source is used.
 */
#ifndef FPGASIM_CARD_CORE_H
#define FPGASIM_CARD_CORE_H

#include <stddef.h>
#include <stdint.h>

#define FPGASIM_ESIM 10000     /* -FPGASIM_ESIM: the simulator cannot do it (SimulationError) */
#define FPGASIM_MAX_CARDS 16
#define FPGASIM_MAX_ARGS 64
#define FPGASIM_MAX_CUS 64
#define FPGASIM_MAX_GROUPS 256
#define FPGASIM_MAX_MEMS 64
#define FPGASIM_NAME 64

/* device modes (FPGASERVE_SIM_DEVICE) */
enum { FPGASIM_INLINE = 0, FPGASIM_TIMING = 1 };

/* bo_alloc flags */
enum { FPGASIM_BO_DEVICE_ONLY = 1, FPGASIM_BO_USERPTR = 2, FPGASIM_BO_HOST_GIVEN = 4 };

/* command states as ERT reports them (ert.h) */
enum { FPGASIM_NEW = 1, FPGASIM_COMPLETED = 4, FPGASIM_ABORT = 6 };

/* notifications to the cold path (fpgasim_set_notify); called with no lock held, by the thread
 * whose call caused them */
enum {
    FPGASIM_NOTE_LOG = 1,     /* flag: 0 warning, 1 error; text: the message */
    FPGASIM_NOTE_HANG = 2,    /* cu: the first hang on that CU; flag: the command was the driver's (KDS) */
    FPGASIM_NOTE_BUFFERS = 3, /* flag: this process holds buffers on the card (1) or none any more (0) */
    FPGASIM_NOTE_STATE = 4,   /* the card's state file changed under this process: read it again */
};
typedef void (*fpgasim_notify_fn)(int32_t kind, int32_t card, int32_t cu, int32_t flag, const char *text);

/* ------------------------------------------------------------------ what the cold path hands in */
struct fpgasim_type {
    int32_t kind; /* 0 float, 1 double, 2 ap_fixed/ap_int family */
    int32_t width;
    int32_t integer;
    int32_t is_signed;
    int32_t container; /* bytes of its power-of-two container */
};

struct fpgasim_arg {
    int32_t id; /* XML argument id, -1 when the xclbin gives none */
    int32_t offset;
    int32_t size;
    int32_t present;
    char name[32];
};

enum { FPGASIM_KRNL_RTL = 1, FPGASIM_KERNEL_WRAPPER = 2, FPGASIM_FAAST = 3 };
/* argument roles of struct fpgasim_model.args */
enum { FPGASIM_ARG_IN = 0, FPGASIM_ARG_OUT = 1, FPGASIM_ARG_LEN_IN = 2, FPGASIM_ARG_LEN_OUT = 3 };
#define FPGASIM_ARG_BATCHSIZE FPGASIM_ARG_LEN_IN

typedef int (*fpgasim_predict_fn)(const void *x, double *y, long n, size_t stack_bytes);

struct fpgasim_model {
    int32_t abi;
    int32_t n_in, n_out;
    int32_t legacy; /* kernel_wrapper without a batchsize argument */
    int32_t batchsize;
    int32_t hw_quant;
    struct fpgasim_type t_in, t_out;
    struct fpgasim_arg args[4];
    int64_t latency, ii, ii_datapath; /* cycles (the environment may override latency and ii) */
    /* the C-simulation (NULL where the model times calls without computing them) */
    fpgasim_predict_fn predict_float, predict_double;
    uint64_t stack_bytes;
    int32_t float_in, float_out, serial;
    int32_t reserved;
};

struct fpgasim_group {
    uint64_t base, size;
    uint64_t members; /* MEM_TOPOLOGY indices it spans (bit m) */
    int32_t used;
    int32_t reserved;
};

struct fpgasim_cu_desc {
    char name[FPGASIM_NAME];
    char kernel[FPGASIM_NAME];
    uint64_t base, span;
    uint64_t arg_banks[FPGASIM_MAX_ARGS]; /* by argument id: the MEM_TOPOLOGY banks it reaches */
    char arg_port[FPGASIM_MAX_ARGS][32];
};

struct fpgasim_adopt {
    int32_t ngroups, nmems, ncus;
    int32_t data_clock_mhz;
    struct fpgasim_group groups[FPGASIM_MAX_GROUPS];
    char mem_tags[FPGASIM_MAX_MEMS][32];
    struct fpgasim_cu_desc cus[FPGASIM_MAX_CUS];
};

/* ------------------------------------------------------------------ what it reports */
struct fpgasim_card_stats {
    uint64_t downloads_unused; /* kept by the cold path */
    uint64_t kernel_starts, kernel_completions, hangs, aborted, starts_while_another_card_hung;
    uint64_t bytes_to_device, bytes_from_device, bytes_to_device_userptr, bytes_from_device_userptr;
    double dma_s_to_device, dma_s_from_device;
    uint64_t dma_to_device_during_kernel;
    uint64_t buffers, uncomputed_calls, nfaults;
    int32_t mode, ncus;
};

struct fpgasim_cu_stats {
    uint64_t commands, completed, rows, queued;
    double busy_s;
    int32_t hung; /* a reason is in fpgasim_cu_hung */
    int32_t reserved;
};

struct fpgasim_cmd_info {
    double submit_t, start_t, end_t, natural_end, est;
    int32_t state; /* 0 queued, 1 running, 2 held, 3 hung, 4 done, 5 aborted */
    int32_t cu;
    int64_t rows;
};

struct fpgasim_buffer_info {
    uint64_t id, address, size;
    int32_t bank, userptr;
};

struct fpgasim_dma_entry {
    double begin, end;
    uint64_t size;
    int32_t to_device, reserved;
};

/* ------------------------------------------------------------------ the hot path the C double calls */
struct fpgasim_core {
    uint32_t size; /* sizeof(struct fpgasim_core): the double checks it */
    uint32_t reserved;
    void (*meter_enter)(void);
    void (*meter_leave)(void);
    const char *(*last_error)(void);
    int64_t (*bo_alloc)(int32_t card, int64_t owner, uint64_t size, int32_t bank, int32_t flags, void *host,
                        uint64_t out[3]);
    int32_t (*bo_free)(uint64_t bo);
    int32_t (*dma)(uint64_t bo, uint64_t offset, uint64_t size, int32_t to_device);
    int64_t (*submit)(int32_t card, const int32_t *cus, int32_t ncus, const void *regs, uint32_t nregs,
                      int32_t need_context, uint32_t *state_word);
    int32_t (*cmd_state)(uint64_t cmd);
    int32_t (*cmd_release)(uint64_t cmd);
    int32_t (*wait)(const uint64_t *cmds, int32_t n, double timeout_s);
};

const struct fpgasim_core *fpgasim_core_table(void);

#endif
