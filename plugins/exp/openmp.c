// exp: the shared unary loop with ../_elementwise/vector_math.h's expf (0.71 ulp at most), which gcc
// vectorises; glibc's is a scalar call.
#include "../_elementwise/vector_math.h"
#define UNARY(x, a) kz_expf(x)
#include "../_elementwise/unary_openmp.h"
