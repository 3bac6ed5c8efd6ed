// tanh: the shared unary kernel with CUDA's tanhf (2 ulp; not sm_75's tanh.approx, 2^-11 relative).
#define UNARY(x, a) tanhf(x)
#include "../_elementwise/unary.cuh"
