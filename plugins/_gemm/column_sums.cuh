// out[j] = Σ_i x[i·ld + j] for j < cols, summed in a fixed order (deterministic, no atomics): column_sums
// leaves one float32 partial per column and split of the rows (blockIdx.y), column_sums_finish adds a
// column's partials in split order. Blocks are 32 columns × 8 row phases, the phases combined in order
// through shared memory. Shared by linear_backward and conv2d_backward (bias gradients).
extern "C" __global__ void __launch_bounds__(256)
    column_sums(const T* x, float* partial, int rows, int cols, long long ld, int rows_per_split) {
  __shared__ float phase_sums[8][33];
  const int j = blockIdx.x * 32 + threadIdx.x;
  const int r0 = blockIdx.y * rows_per_split;
  const int r1 = min(rows, r0 + rows_per_split);
  float sum = 0.0f;
  if (j < cols)
    for (int i = r0 + threadIdx.y; i < r1; i += 8) sum += kz_to_float(x[(long long)i * ld + j]);
  phase_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
#pragma unroll
    for (int y = 1; y < 8; ++y) sum += phase_sums[y][threadIdx.x];
    partial[(long long)blockIdx.y * cols + j] = sum;
  }
}

extern "C" __global__ void column_sums_finish(const float* partial, T* out, int splits, int cols) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float sum = 0.0f;
  for (int z = 0; z < splits; ++z) sum += partial[(long long)z * cols + j];
  out[j] = kz_from_float<T>(sum);
}
