// tanh: the shared unary loop with glibc's tanhf.
#define UNARY(x, a) tanhf(x)
#include "../_elementwise/unary_openmp.h"
