//Numpy array shape [8]
//Min -0.162131890655
//Max 0.136753693223
//Number of zeros 0

#ifndef B5_H_
#define B5_H_

#ifndef __SYNTHESIS__
conv2_bias_t b5[8];
#else
conv2_bias_t b5[8] = {0.0723886788, 0.0078362348, -0.1112284437, 0.0921404436, -0.1621318907, 0.1367536932, -0.0710720569, -0.0175855402};

#endif

#endif
