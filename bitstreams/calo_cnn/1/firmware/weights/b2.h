//Numpy array shape [4]
//Min -0.046282194555
//Max 0.295365244150
//Number of zeros 0

#ifndef B2_H_
#define B2_H_

#ifndef __SYNTHESIS__
conv1_bias_t b2[4];
#else
conv1_bias_t b2[4] = {0.0292518698, 0.0473425463, 0.2953652442, -0.0462821946};

#endif

#endif
