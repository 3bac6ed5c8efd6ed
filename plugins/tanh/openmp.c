// tanh: the shared unary loop with ../_elementwise/vector_math.h's tanhf (Cephes', about 2 ulp), in
// AVX-512 where the CPU has it; glibc's is a scalar call.
#include "../_elementwise/vector_math.h"
#define UNARY(x, a) kz_tanhf(x)
#define UNARY16(v, a) kz_tanhf16(v)
#include "../_elementwise/unary_openmp.h"
