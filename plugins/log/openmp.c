// log: the shared unary loop with glibc's logf.
#define UNARY(x, a) logf(x)
#include "../_elementwise/unary_openmp.h"
