// adam_update_foreach_ on the CPU: the Adam loop of ../_optim/adam_openmp.h over every
// entry of a table, in one parallel region. Row t of the table holds entry t's addresses p, grad, m, v,
// v_max (0 without amsgrad) and its size n, as long longs. Every thread takes its share of each entry in
// turn, so entries of any size spread over all threads without a region per entry.
#include "../_optim/adam_openmp.h"

void adam_update_foreach(const long long *table, int count, float step_size, float bc2_sqrt, float w1, float beta2,
                         float eps, float weight_decay, float decay, int decoupled, int amsgrad, int threads) {
    const Adam a = {step_size, bc2_sqrt, w1, beta2, eps, weight_decay, decay};
    const int mode = adam_mode(weight_decay, decoupled);
    long long total = 0;
    for (int t = 0; t < count; ++t) total += table[6 * t + 5];
    #pragma omp parallel num_threads(threads) if (total >= 65536)
    {
        const int thread = omp_get_thread_num(), team = omp_get_num_threads();
        for (int t = 0; t < count; ++t) {
            const long long *row = table + 6 * t;
            adam_share((float *)row[0], (const float *)row[1], (float *)row[2], (float *)row[3], (float *)row[4],
                       row[5], thread, team, a, mode, amsgrad);
        }
    }
}
