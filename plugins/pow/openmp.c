// pow: torch's special cases (see plugins/pow/__init__.py) and glibc's powf otherwise, each case its own
// instance of the shared unary loop, chosen once per call. One loop testing the exponent per element
// left the case a = 2 at half the speed of a = 3: gcc did not unswitch it on every test, so some cases
// did not vectorise.
#include <math.h>

#define KZ_UNARY_NAME pow_sqrt
#define UNARY(x, a) sqrtf(x)  // sqrt(-inf) = NaN and sqrt(-0) = -0: powf gives inf and +0
#include "../_elementwise/unary_openmp.h"
#define KZ_UNARY_NAME pow_rsqrt
#define UNARY(x, a) (1.0f / sqrtf(x))
#include "../_elementwise/unary_openmp.h"
#define KZ_UNARY_NAME pow_reciprocal
#define UNARY(x, a) (1.0f / (x))
#include "../_elementwise/unary_openmp.h"
#define KZ_UNARY_NAME pow_square
#define UNARY(x, a) ((x) * (x))
#include "../_elementwise/unary_openmp.h"
#define KZ_UNARY_NAME pow_cube
#define UNARY(x, a) ((x) * (x) * (x))
#include "../_elementwise/unary_openmp.h"
#define KZ_UNARY_NAME pow_general
#define UNARY(x, a) powf(x, a)
#include "../_elementwise/unary_openmp.h"

void unary(const float *restrict x, float *restrict y, long long n, float a, int threads) {
    if (a == 0.5f) pow_sqrt(x, y, n, a, threads);
    else if (a == -0.5f) pow_rsqrt(x, y, n, a, threads);
    else if (a == -1.0f) pow_reciprocal(x, y, n, a, threads);
    else if (a == 2.0f) pow_square(x, y, n, a, threads);
    else if (a == 3.0f) pow_cube(x, y, n, a, threads);
    else pow_general(x, y, n, a, threads);
}
