// adam_update_'s kernels: the element update and its vector and scalar passes are ../_optim/adam.cuh's, which
// adam_update_foreach_ shares.
#include "../_optim/adam.cuh"

extern "C" __global__ void __launch_bounds__(THREADS) adam_update_vec ADAM_PARAMS { ADAM_BODY(PACK); }
extern "C" __global__ void __launch_bounds__(THREADS) adam_update_scalar ADAM_PARAMS { ADAM_BODY(1); }
