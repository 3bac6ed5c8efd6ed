// pow: torch's special cases (see plugins/pow/__init__.py) and glibc's powf otherwise, one loop per case,
// chosen once per call. A single loop testing the exponent per element (the shared unary loop) left the
// case a = 2 at half the speed of a = 3 on a 2-core Xeon (1.33 against 0.67 ms at 2048 x 2048): the
// loop was not unswitched on every test, so some cases did not vectorise.
#include "../_openmp/parallel.h"
#include <math.h>

#define POW_LOOP(expr)                                                                                   \
    _Pragma("omp parallel for num_threads(threads) schedule(static) if (n >= PARALLEL_MIN_CALLS)")      \
    for (long long i = 0; i < n; ++i) {                                                                  \
        const float v = x[i];                                                                            \
        y[i] = (expr);                                                                                   \
    }

void unary(const float *restrict x, float *restrict y, long long n, float a, int threads) {
    if (a == 0.5f) {
        POW_LOOP(sqrtf(v))  // sqrt(-inf) = NaN and sqrt(-0) = -0: powf gives inf and +0
    } else if (a == -0.5f) {
        POW_LOOP(1.0f / sqrtf(v))
    } else if (a == -1.0f) {
        POW_LOOP(1.0f / v)
    } else if (a == 2.0f) {
        POW_LOOP(v * v)
    } else if (a == 3.0f) {
        POW_LOOP(v * v * v)
    } else {
        POW_LOOP(powf(v, a))
    }
}
