// exp: the shared unary loop with ../_elementwise/vector_math.h's expf (0.71 ulp at most), in AVX-512
// where the CPU has it; glibc's is a scalar call.
#include "../_elementwise/vector_math.h"
#define UNARY(x, a) kz_expf(x)
#define UNARY16(v, a) kz_expf16(v)
#include "../_elementwise/unary_openmp.h"
