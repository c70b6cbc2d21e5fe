//Numpy array shape [1]
//Min -0.025253690779
//Max -0.025253690779
//Number of zeros 0

#ifndef B6_H_
#define B6_H_

#ifndef __SYNTHESIS__
fc3_bias_t b6[1];
#else
fc3_bias_t b6[1] = {-0.0252536908};

#endif

#endif
