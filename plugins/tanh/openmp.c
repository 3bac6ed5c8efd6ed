// tanh: the shared unary loop with ../_elementwise/vector_math.h's tanhf (Cephes', about 2 ulp), which
// gcc vectorises; glibc's is a scalar call.
#include "../_elementwise/vector_math.h"
#define UNARY(x, a) kz_tanhf(x)
#include "../_elementwise/unary_openmp.h"
