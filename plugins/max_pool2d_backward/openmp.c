// max_pool2d's gradient: one parallel loop over planes; each plane zeroes its gradient, then adds its
// outputs' gradients at their indices in output order (deterministic; torch's CPU order too).
// Returns how many indices fall outside their plane (those add nothing).
#include "../_openmp/parallel.h"
#include <string.h>

long long max_pool2d_backward(const float *g, const long long *indices, float *gx, long long planes,
                              long long hw, long long outputs, int threads) {
    long long bad = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : bad) if (planes * hw >= PARALLEL_MIN)
    for (long long p = 0; p < planes; ++p) {
        float *plane = gx + p * hw;
        const float *gp = g + p * outputs;
        const long long *ip = indices + p * outputs;
        memset(plane, 0, sizeof(float) * (size_t)hw);
        for (long long o = 0; o < outputs; ++o) {
            if (ip[o] < 0 || ip[o] >= hw) {
                ++bad;
                continue;
            }
            plane[ip[o]] += gp[o];
        }
    }
    return bad;
}
