// relu_backward: out = y <= 0 ? 0 : grad (a = grad, b = y; a NaN y passes grad through, as torch's
// threshold_backward), through the shared binary functions (relu_backward_contiguous,
// relu_backward_strided; see ../_elementwise/binary_openmp.h). The select vectorises as a blend.
#define KZ_BINARY_NAME(suffix) relu_backward_##suffix
#define KZ_BINARY_OP(grad, y) ((y) <= 0.0f ? 0.0f : (grad))
#include "../_elementwise/binary_openmp.h"
