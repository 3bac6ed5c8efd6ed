// adam_update_ on the CPU: the vectorised loop of ../_optim/adam_openmp.h, which adam_update_foreach_ shares,
// over one tensor in one parallel region.
#include "../_optim/adam_openmp.h"

void adam_update(float *restrict p, const float *restrict grad, float *restrict m, float *restrict v,
                 float *restrict v_max, long long n, float step_size, float bc2_sqrt, float w1, float beta2,
                 float eps, float weight_decay, float decay, int decoupled, int amsgrad, int threads) {
    const Adam a = {step_size, bc2_sqrt, w1, beta2, eps, weight_decay, decay};
    const int mode = adam_mode(weight_decay, decoupled);
    // the square root and division cost per element like a libm call, so a second thread pays from
    // PARALLEL_MIN_CALLS elements on, not PARALLEL_MIN
    #pragma omp parallel num_threads(threads) if (n >= PARALLEL_MIN_CALLS)
    adam_share(p, grad, m, v, v_max, n, omp_get_thread_num(), omp_get_num_threads(), a, mode, amsgrad);
}
