#ifndef DEFINES_H_
#define DEFINES_H_

#include "ap_fixed.h"
#include "ap_int.h"
#include "nnet_utils/nnet_types.h"
#include <array>
#include <cstddef>
#include <cstdio>
#include <tuple>
#include <tuple>


// hls-fpga-machine-learning insert numbers

// hls-fpga-machine-learning insert layer-precision
typedef ap_fixed<16,6> input_t;
typedef ap_fixed<37,17> conv1_accum_t;
typedef ap_fixed<37,17> conv1_result_t;
typedef ap_fixed<16,6> conv1_weight_t;
typedef ap_fixed<16,6> conv1_bias_t;
typedef ap_fixed<16,6> layer3_t;
typedef ap_fixed<18,8> relu1_table_t;
typedef ap_fixed<16,6> pool1_accum_t;
typedef ap_fixed<16,6> layer4_t;
typedef ap_fixed<39,19> conv2_accum_t;
typedef ap_fixed<39,19> conv2_result_t;
typedef ap_fixed<16,6> conv2_weight_t;
typedef ap_fixed<16,6> conv2_bias_t;
typedef ap_fixed<16,6> layer6_t;
typedef ap_fixed<18,8> relu2_table_t;
typedef ap_fixed<16,6> pool2_accum_t;
typedef ap_fixed<16,6> layer7_t;
typedef ap_fixed<38,18> fc_accum_t;
typedef ap_fixed<16,6> layer9_t;
typedef ap_fixed<16,6> fc_weight_t;
typedef ap_fixed<16,6> fc_bias_t;
typedef ap_uint<1> layer9_index;
typedef ap_fixed<18,4,AP_RND,AP_SAT,0> softmax_accum_t;
typedef ap_fixed<18,2,AP_RND,AP_SAT,0> softmax_exp_table_t;
typedef ap_fixed<18,2,AP_RND,AP_SAT,0> softmax_inv_table_t;
typedef ap_fixed<18,4,AP_RND,AP_SAT,0> softmax_inv_inp_t;
typedef ap_fixed<16,6> result_t;
typedef ap_fixed<18,8> softmax_table_t;

// hls-fpga-machine-learning insert emulator-defines


#endif
