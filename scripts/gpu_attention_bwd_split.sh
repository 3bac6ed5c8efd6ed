#!/usr/bin/env bash
# One device call for the cuda attention backward's SPLIT layout: correctness on odd shapes against the float64
# reference (attention_cuda_check.py: default, first and SPLIT 1 configs), its speed against FA2
# (attention_bwd_split.py), and ncu of the dK/dV kernels of both layouts and of FA2's. Logs under $OUT.
#     . .whl/env.sh && scripts/gpu_attention_bwd_split.sh
set -uo pipefail
out=${OUT:-/tmp/kz-out}
mkdir -p "$out"
python scripts/attention_cuda_check.py --skip-timing > "$out/check.log" 2>&1
echo "attention_cuda_check: rc $?, $(grep -c '^ok' "$out/check.log") ok, $(grep -c '^FAIL\|^ERROR' "$out/check.log") failed"
grep '^FAIL\|^ERROR' "$out/check.log" | head -5
python scripts/attention_bwd_split.py > "$out/split.log" 2>&1
echo "attention_bwd_split: rc $?"
grep -i mismatch "$out/split.log" | head -5
if command -v ncu > /dev/null; then
  ncu -k 'regex:attention_backward_dkdv|flash_bwd_dq_dk_dv' -c 6 --section SpeedOfLight --section WarpStateStats \
      --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum,sm__cycles_elapsed.max,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
      python scripts/attention_bwd_split.py --ncu > "$out/ncu.txt" 2>&1
  echo "ncu: rc $?"
  grep -E '^  [a-z_]+.*\(|wavefronts_mem_shared|inst_executed.sum|cycles_elapsed.max|hmma_cycles' "$out/ncu.txt" | head -40
fi
tail -8 "$out/split.log"
