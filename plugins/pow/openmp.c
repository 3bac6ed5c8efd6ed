// pow: the shared unary loop with torch's special cases (see plugins/pow/__init__.py) and glibc's
// powf otherwise; a is the same for every element, so gcc unswitches the loop on it.
#include <math.h>

static inline float pow_torch(float x, float a) {
    if (a == 0.5f) return sqrtf(x);         // sqrt(-inf) = NaN and sqrt(-0) = -0: powf gives inf and +0
    if (a == -0.5f) return 1.0f / sqrtf(x);
    if (a == -1.0f) return 1.0f / x;
    if (a == 2.0f) return x * x;
    if (a == 3.0f) return x * x * x;
    return powf(x, a);
}

#define UNARY(x, a) pow_torch(x, a)
#include "../_elementwise/unary_openmp.h"
