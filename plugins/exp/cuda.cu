// exp: the shared unary kernel with CUDA's expf (2 ulp; not __expf, off by 2 + 1.17·|x| ulp).
#define UNARY(x, a) expf(x)
#include "../_elementwise/unary.cuh"
