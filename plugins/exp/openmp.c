// exp: the shared unary loop with glibc's expf.
#define UNARY(x, a) expf(x)
#include "../_elementwise/unary_openmp.h"
