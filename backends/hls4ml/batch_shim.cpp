// fpgaserve batch entry points for an hls4ml C-simulation library.
//
// This file is a template: csim.py replaces the @-delimited placeholders below and compiles the
// result together with the project's firmware/*.cpp.  hls4ml's own bridge
// (myproject_bridge.cpp) evaluates ONE sample per ctypes call, so its Python-side loop pays
// the ctypes/numpy overhead per row; here the loop over rows runs in C++, and ctypes
// releases the GIL for the whole batch.
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

#include <cstddef>
#include <map>
#include <string>

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

// One sample: src[FPGASERVE_N_IN] -> dst[FPGASERVE_N_OUT].  The local arrays live on the
// stack, so concurrent calls from several threads share nothing but the weights (read-only
// once the first call has loaded them, see csim.py's warm-up).
template <class src_T> inline void run_one(const src_T *src, double *dst) {
    // convert_data takes non-const pointers but only reads src.
    src_T *in = const_cast<src_T *>(src);
#if !FPGASERVE_ACCELERATOR && FPGASERVE_IO_STREAM
    // the stream layers keep state in statics (line buffers, pixel counters): csim.py calls
    // an io_stream library from one thread at a time
    hls::stream<@IN_CTYPE@> in_stream("fpgaserve_in");
    hls::stream<@OUT_CTYPE@> out_stream("fpgaserve_out");
    nnet::convert_data<src_T, @IN_CTYPE@, FPGASERVE_N_IN>(in, in_stream);
    @PROJECT@(in_stream, out_stream);
    nnet::convert_data<@OUT_CTYPE@, double, FPGASERVE_N_OUT>(out_stream, dst);
#else
    fpgaserve_word_in in_words[FPGASERVE_N_IN];
    fpgaserve_word_out out_words[FPGASERVE_N_OUT];
    nnet::convert_data<src_T, fpgaserve_word_in, FPGASERVE_N_IN>(in, in_words);
#if FPGASERVE_ACCELERATOR
    @PROJECT@_axi(in_words, out_words);
#else
    @PROJECT@(in_words, out_words);
#endif
    nnet::convert_data<fpgaserve_word_out, double, FPGASERVE_N_OUT>(out_words, dst);
#endif
}

template <class src_T> inline void run_batch(const src_T *x, double *y, long n) {
    for (long row = 0; row < n; row++) {
        run_one<src_T>(x + row * (long)FPGASERVE_N_IN, y + row * (long)FPGASERVE_N_OUT);
    }
}

} // namespace

// The library is built with -fvisibility=hidden so that nothing but these entry points is
// exported (no interposition between several projects' libraries in one process).
extern "C" {

__attribute__((visibility("default"))) long fpgaserve_n_in(void) { return FPGASERVE_N_IN; }

__attribute__((visibility("default"))) long fpgaserve_n_out(void) { return FPGASERVE_N_OUT; }

// x: n rows of FPGASERVE_N_IN float32 values; y: n rows of FPGASERVE_N_OUT doubles.
__attribute__((visibility("default"))) void fpgaserve_predict_float(const float *x, double *y, long n) {
    run_batch<float>(x, y, n);
}

// Same for float64 rows (converted from double, as hls4ml's <project>_double does).
__attribute__((visibility("default"))) void fpgaserve_predict_double(const double *x, double *y, long n) {
    run_batch<double>(x, y, n);
}

} // extern "C"
