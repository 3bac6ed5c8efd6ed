// add: out = a + alpha * b, through the shared binary functions (add_contiguous, add_strided; see
// ../_elementwise/binary_openmp.h), alpha a scalar parameter of both.
#define KZ_BINARY_NAME(suffix) add_##suffix
#define KZ_BINARY_PARAMS , float alpha
#define KZ_BINARY_ARGS , alpha
#define KZ_BINARY_OP(a, b) ((a) + alpha * (b))
#include "../_elementwise/binary_openmp.h"
