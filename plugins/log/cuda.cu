// log: the shared unary kernel with CUDA's logf (1 ulp; not __logf).
#define UNARY(x, a) logf(x)
#include "../_elementwise/unary.cuh"
