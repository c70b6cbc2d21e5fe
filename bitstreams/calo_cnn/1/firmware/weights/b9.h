//Numpy array shape [5]
//Min -0.018450127915
//Max 0.162922367454
//Number of zeros 0

#ifndef B9_H_
#define B9_H_

#ifndef __SYNTHESIS__
fc_bias_t b9[5];
#else
fc_bias_t b9[5] = {0.1629223675, 0.0434918515, -0.0184501279, 0.1108287126, 0.1432305425};

#endif

#endif
