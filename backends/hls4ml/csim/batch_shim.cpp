// fpgaserve batch entry points for an hls4ml C-simulation library.
//
// This file is a template: csim.py replaces the @-delimited placeholders below and compiles the
// result together with the project's firmware/*.cpp.  hls4ml's own bridge
// (myproject_bridge.cpp) evaluates ONE sample per ctypes call, so its Python-side loop pays
// the ctypes/numpy overhead per row; here the loop over rows runs in C++, and ctypes
// releases the GIL for the whole batch. The rows run on a thread this file starts, with a stack
// sized for the firmware's locals (see "the firmware's thread" below).
//
// io_parallel top functions take arrays; a plain io_stream top function takes hls::stream<input_t>
// of nnet::array words (FPGASERVE_IO_STREAM): the row goes in and out through hls4ml's own
// stream convert_data (nnet_helpers.h), as its bridge does. VivadoAccelerator projects of either
// io type are called through <project>_axi, which takes arrays.
//
// Each row goes through exactly the conversions the firmware sees:
//  * VivadoAccelerator projects: the value is converted to the stream word type of
//    <project>_axi.h (T_in: float, or the ap_fixed<W,I> of AcceleratorConfig.Precision),
//    and the accelerator wrapper <project>_axi() casts it to input_t, runs the network and
//    casts result_t to T_out.  That wrapper is the code synthesized onto the card, so calling
//    it (as hls4ml's bridge does) keeps us bit-identical with HLSModel.predict.
//  * other projects: the value is converted straight to input_t and result_t is converted
//    to double, as in hls4ml's bridge.

#define FPGASERVE_ACCELERATOR @ACCELERATOR@
#define FPGASERVE_N_IN @N_IN@
#define FPGASERVE_N_OUT @N_OUT@
#define FPGASERVE_IO_STREAM @IO_STREAM@

#if FPGASERVE_ACCELERATOR
#include "firmware/@PROJECT@_axi.h"
#else
#include "firmware/@PROJECT@.h"
#endif
#include "firmware/nnet_utils/nnet_helpers.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

// nnet_helpers.h declares the layer-trace globals "extern"; hls4ml's bridge defines them.
// This file replaces the bridge, so it defines them too (tracing stays off: a traced layer
// would otherwise write into a map nobody reads, and from several threads at once).
namespace nnet {
bool trace_enabled = false;
std::map<std::string, void *> *trace_outputs = NULL;
size_t trace_type_size = sizeof(double);
} // namespace nnet

namespace {

#if FPGASERVE_ACCELERATOR
typedef input_axi_t fpgaserve_word_in;
typedef output_axi_t fpgaserve_word_out;
#else
typedef @IN_CTYPE@ fpgaserve_word_in;
typedef @OUT_CTYPE@ fpgaserve_word_out;
#endif

// One batch's buffers between the caller's rows and the firmware. They live on the heap, sized
// once per batch and reused for every row: a row of a large model is megabytes, and the stack
// is left to the firmware's own locals (hls4ml keeps every layer output there).
#if !FPGASERVE_ACCELERATOR && FPGASERVE_IO_STREAM
struct RowBuffers {
    hls::stream<@IN_CTYPE@> in_stream{"fpgaserve_in"};
    hls::stream<@OUT_CTYPE@> out_stream{"fpgaserve_out"};
};
#else
struct RowBuffers {
    std::vector<fpgaserve_word_in> in_words = std::vector<fpgaserve_word_in>(FPGASERVE_N_IN);
    std::vector<fpgaserve_word_out> out_words = std::vector<fpgaserve_word_out>(FPGASERVE_N_OUT);
};
#endif

// One sample: src[FPGASERVE_N_IN] -> dst[FPGASERVE_N_OUT]. Concurrent calls from several
// threads share nothing but the weights (read-only once the first call has loaded them, see
// csim.py's warm-up).
template <class src_T> inline void run_one(const src_T *src, double *dst, RowBuffers &buf) {
    // convert_data takes non-const pointers but only reads src.
    src_T *in = const_cast<src_T *>(src);
#if !FPGASERVE_ACCELERATOR && FPGASERVE_IO_STREAM
    // the stream layers keep state in statics (line buffers, pixel counters): csim.py calls
    // an io_stream library from one thread at a time. Both streams are empty again after a row.
    nnet::convert_data<src_T, @IN_CTYPE@, FPGASERVE_N_IN>(in, buf.in_stream);
    @PROJECT@(buf.in_stream, buf.out_stream);
    nnet::convert_data<@OUT_CTYPE@, double, FPGASERVE_N_OUT>(buf.out_stream, dst);
#else
    nnet::convert_data<src_T, fpgaserve_word_in, FPGASERVE_N_IN>(in, buf.in_words.data());
#if FPGASERVE_ACCELERATOR
    @PROJECT@_axi(buf.in_words.data(), buf.out_words.data());
#else
    @PROJECT@(buf.in_words.data(), buf.out_words.data());
#endif
    nnet::convert_data<fpgaserve_word_out, double, FPGASERVE_N_OUT>(buf.out_words.data(), dst);
#endif
}

template <class src_T> inline void run_batch(const src_T *x, double *y, long n) {
    RowBuffers buf;
    for (long row = 0; row < n; row++) {
        run_one<src_T>(x + row * (long)FPGASERVE_N_IN, y + row * (long)FPGASERVE_N_OUT, buf);
    }
}

// ---------------------------------------------------------------- the firmware's thread
// The firmware runs on a thread of this library's, whose stack csim.py sizes from the project
// (stack.py): hls4ml's C-simulation keeps layer outputs as local arrays, hundreds of MB for a
// large network, and the calling thread's stack (8 MB for a Python thread) would overflow.
// A thread started here, not a Python thread of that size: ctypes keeps the GIL released for
// the whole batch, and threading.stack_size would change the stack of every later thread of
// the server. Stacks are mapped once and reused (a pool, one stack per concurrent caller):
// a new thread per batch costs microseconds, and the stack pages a row touched stay mapped,
// so a batch does not fault them in again.

// A stack mapping: `guard` bytes of PROT_NONE at its low end (a row that still overflowed
// faults there, never in a neighbouring mapping), then `size` usable bytes. MAP_NORESERVE:
// the size is an estimate erring high, only touched pages take memory.
struct Stack {
    char *base;
    size_t size;
    size_t guard;
};

std::mutex stack_pool_mutex;
std::vector<Stack> stack_pool;

// A free stack of `size` bytes from the pool, else a new mapping; false when none can be mapped.
bool take_stack(size_t size, Stack *out) {
    {
        std::lock_guard<std::mutex> hold(stack_pool_mutex);
        for (size_t i = 0; i < stack_pool.size(); i++) {
            if (stack_pool[i].size == size) {
                *out = stack_pool[i];
                stack_pool.erase(stack_pool.begin() + (long)i);
                return true;
            }
        }
    }
    size_t guard = (size_t)sysconf(_SC_PAGESIZE);
    void *base = mmap(NULL, guard + size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                      -1, 0);
    if (base == MAP_FAILED) return false;
    if (mprotect(base, guard, PROT_NONE) != 0) {
        munmap(base, guard + size);
        return false;
    }
    *out = Stack{static_cast<char *>(base), size, guard};
    return true;
}

void give_stack(const Stack &stack) {
    std::lock_guard<std::mutex> hold(stack_pool_mutex);
    stack_pool.push_back(stack);
}

struct Batch {
    const void *x;
    double *y;
    long n;
    bool is_double;
};

void *run_batch_thread(void *arg) {
    Batch *batch = static_cast<Batch *>(arg);
    if (batch->is_double) {
        run_batch<double>(static_cast<const double *>(batch->x), batch->y, batch->n);
    } else {
        run_batch<float>(static_cast<const float *>(batch->x), batch->y, batch->n);
    }
    return NULL;
}

// Runs the batch on a thread with a `stack_bytes` stack and waits for it: 0, or an errno
// (ENOMEM: no stack could be mapped; pthread's error otherwise).
int run_on_stack(const void *x, double *y, long n, bool is_double, size_t stack_bytes) {
    Stack stack;
    if (!take_stack(stack_bytes, &stack)) return ENOMEM;
    Batch batch{x, y, n, is_double};
    pthread_attr_t attr;
    int err = pthread_attr_init(&attr);
    if (err == 0) {
        err = pthread_attr_setstack(&attr, stack.base + stack.guard, stack.size);
        pthread_t thread;
        if (err == 0) err = pthread_create(&thread, &attr, run_batch_thread, &batch);
        if (err == 0) err = pthread_join(thread, NULL);
        pthread_attr_destroy(&attr);
    }
    give_stack(stack);
    return err;
}

} // namespace

// The library is built with -fvisibility=hidden so that nothing but these entry points is
// exported (no interposition between several projects' libraries in one process).
extern "C" {

__attribute__((visibility("default"))) long fpgaserve_n_in(void) { return FPGASERVE_N_IN; }

__attribute__((visibility("default"))) long fpgaserve_n_out(void) { return FPGASERVE_N_OUT; }

// x: n rows of FPGASERVE_N_IN float32 values; y: n rows of FPGASERVE_N_OUT doubles; the rows
// run on a thread with a stack_bytes stack. Returns 0, or the errno that kept the thread from
// starting (nothing ran then).
__attribute__((visibility("default"))) int fpgaserve_predict_float(const float *x, double *y, long n,
                                                                   size_t stack_bytes) {
    return run_on_stack(x, y, n, false, stack_bytes);
}

// Same for float64 rows (converted from double, as hls4ml's <project>_double does).
__attribute__((visibility("default"))) int fpgaserve_predict_double(const double *x, double *y, long n,
                                                                    size_t stack_bytes) {
    return run_on_stack(x, y, n, true, stack_bytes);
}

} // extern "C"
