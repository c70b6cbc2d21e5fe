#include <iostream>

#include "myproject.h"
#include "parameters.h"


void myproject(
    input_t input_1[16*16*1],
    result_t layer10_out[5]
) {

    // hls-fpga-machine-learning insert IO
    #pragma HLS ARRAY_RESHAPE variable=input_1 complete dim=0
    #pragma HLS ARRAY_PARTITION variable=layer10_out complete dim=0
    #pragma HLS INTERFACE ap_vld port=input_1,layer10_out 
    #pragma HLS DATAFLOW

    // hls-fpga-machine-learning insert load weights
#ifndef __SYNTHESIS__
    static bool loaded_weights = false;
    if (!loaded_weights) {
        nnet::load_weights_from_txt<conv1_weight_t, 36>(w2, "w2.txt");
        nnet::load_weights_from_txt<conv1_bias_t, 4>(b2, "b2.txt");
        nnet::load_weights_from_txt<conv2_weight_t, 288>(w5, "w5.txt");
        nnet::load_weights_from_txt<conv2_bias_t, 8>(b5, "b5.txt");
        nnet::load_weights_from_txt<fc_weight_t, 160>(w9, "w9.txt");
        nnet::load_weights_from_txt<fc_bias_t, 5>(b9, "b9.txt");
        loaded_weights = true;    }
#endif
    // ****************************************
    // NETWORK INSTANTIATION
    // ****************************************

    // hls-fpga-machine-learning insert layers

    conv1_result_t layer2_out[14*14*4];
    #pragma HLS ARRAY_PARTITION variable=layer2_out complete dim=0

    layer3_t layer3_out[14*14*4];
    #pragma HLS ARRAY_PARTITION variable=layer3_out complete dim=0

    layer4_t layer4_out[7*7*4];
    #pragma HLS ARRAY_PARTITION variable=layer4_out complete dim=0

    conv2_result_t layer5_out[5*5*8];
    #pragma HLS ARRAY_PARTITION variable=layer5_out complete dim=0

    layer6_t layer6_out[5*5*8];
    #pragma HLS ARRAY_PARTITION variable=layer6_out complete dim=0

    layer7_t layer7_out[2*2*8];
    #pragma HLS ARRAY_PARTITION variable=layer7_out complete dim=0

    auto& layer8_out = layer7_out;
    layer9_t layer9_out[5];
    #pragma HLS ARRAY_PARTITION variable=layer9_out complete dim=0

    nnet::conv_2d_cl<input_t, conv1_result_t, config2>(input_1, layer2_out, w2, b2); // conv1

    nnet::relu<conv1_result_t, layer3_t, relu_config3>(layer2_out, layer3_out); // relu1

    nnet::pooling2d_cl<layer3_t, layer4_t, config4>(layer3_out, layer4_out); // pool1

    nnet::conv_2d_cl<layer4_t, conv2_result_t, config5>(layer4_out, layer5_out, w5, b5); // conv2

    nnet::relu<conv2_result_t, layer6_t, relu_config6>(layer5_out, layer6_out); // relu2

    nnet::pooling2d_cl<layer6_t, layer7_t, config7>(layer6_out, layer7_out); // pool2

    nnet::dense<layer7_t, layer9_t, config9>(layer8_out, layer9_out, w9, b9); // fc

    nnet::softmax<layer9_t, result_t, softmax_config10>(layer9_out, layer10_out); // softmax

}

