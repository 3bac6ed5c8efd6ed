#!/usr/bin/env bash
# One device call for the atomic-dQ adds without per-add checks (add_rows in attention_backward/cuda.cu): the cuda
# backward against the float64 reference on odd shapes (attention_cuda_check.py), then its GPU time against the
# kernel it replaces and FA2's, in interleaved rounds (attention_bwd_split.py --old-source), at the tuned configs
# (SPLIT 1 at head dim 128; 4 warps, 32-query steps at 64). Before the call, here:
#     mkdir -p .kz && git show main:plugins/attention_backward/cuda.cu > .kz/old_cuda.cu
# then, carrying .whl and .kz:  . .whl/env.sh && scripts/gpu_attention_bwd_red.sh        (logs under $OUT)
set -uo pipefail
out=${OUT:-/tmp/kz-out}
mkdir -p "$out"
. scripts/gpu_common.sh
attention_check
python3 scripts/attention_bwd_split.py --old-source "${OLD_SOURCE:-.kz/old_cuda.cu}" \
    --config 'split1={"SPLIT": 1}' --config 'w4i32={"WARPS": 4, "BLOCK_INNER": 32}' > "$out/ab.log" 2>&1
echo "attention_bwd_split: rc $?"
grep -i "mismatch" "$out/ab.log" | head -5
tail -n 8 "$out/ab.log"
