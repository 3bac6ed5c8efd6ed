// mul: out = a * b, through the shared binary functions (mul_contiguous, mul_strided; see
// ../_elementwise/binary_openmp.h).
#define KZ_BINARY_NAME(suffix) mul_##suffix
#define KZ_BINARY_OP(a, b) ((a) * (b))
#include "../_elementwise/binary_openmp.h"
