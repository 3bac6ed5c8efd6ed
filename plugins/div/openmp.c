// div: out = a / b (IEEE division), through the shared binary functions (div_contiguous, div_strided;
// see ../_elementwise/binary_openmp.h).
#define KZ_BINARY_NAME(suffix) div_##suffix
#define KZ_BINARY_OP(a, b) ((a) / (b))
#include "../_elementwise/binary_openmp.h"
