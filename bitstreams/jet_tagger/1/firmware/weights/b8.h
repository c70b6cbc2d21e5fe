//Numpy array shape [5]
//Min -0.140373915434
//Max 0.161765009165
//Number of zeros 0

#ifndef B8_H_
#define B8_H_

#ifndef __SYNTHESIS__
fc4_bias_t b8[5];
#else
fc4_bias_t b8[5] = {-0.0558280014, 0.1061424017, -0.1016871110, -0.1403739154, 0.1617650092};

#endif

#endif
