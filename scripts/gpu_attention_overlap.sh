#!/usr/bin/env bash
# One device call: the warpgroup forward's FlashAttention-3 orders, config entries of plugins/attention/cuda.cu:
# OVERLAP 1 (tile j's S = Q·Kᵀ issued with tile j-1's P·V, the softmax while P·V runs), PRODUCER 3 (a producer
# warpgroup whose registers go to the consumers). (Its first run also timed PINGPONG 1, two warpgroups taking
# turns to issue by named barriers: no gain, dropped.) First the odd-shape checks of those configs against
# float64 (the forward's only), then every variant timed in the same rounds (attention_wgmma_ab.py, B=4 H=32
# N=4096 fp16, checked against FA2 first).
#     . .whl/env.sh && scripts/gpu_attention_overlap.sh
set -uo pipefail
out=${OUT:-/tmp/kz-out}
mkdir -p "$out"
. scripts/gpu_common.sh
w8='"WGMMA": 1, "WARPS": 8, "STAGES": 3'
attention_check --forward "[
  {$w8, \"BLOCK_N\": 128, \"PRODUCER\": 3}, {$w8, \"BLOCK_N\": 128, \"PRODUCER\": 3, \"OVERLAP\": 1},
  {$w8, \"BLOCK_N\": 64, \"PRODUCER\": 2, \"OVERLAP\": 1},
  {\"WGMMA\": 1, \"WARPS\": 4, \"BLOCK_M\": 64, \"BLOCK_N\": 128, \"STAGES\": 3, \"PRODUCER\": 2, \"OVERLAP\": 1},
  {\"WGMMA\": 1, \"WARPS\": 4, \"BLOCK_M\": 64, \"BLOCK_N\": 32, \"STAGES\": 2, \"PRODUCER\": 1, \"OVERLAP\": 1}]" \
  || exit 1
configs=128/128/8/3+PRODUCER=2,128/128/8/3+PRODUCER=3,128/128/8/3+PRODUCER=3+OVERLAP=1
configs+=,128/64/8/3+PRODUCER=2,128/64/8/3+PRODUCER=2+OVERLAP=1,192/128/12/2,64/128/4/2,64/64/4/2+PRODUCER=2
configs+=,64/128/4/3+PRODUCER=2+OVERLAP=1,64/64/4/3+PRODUCER=2+OVERLAP=1
timeout 400 python3 scripts/attention_wgmma_ab.py --configs "$configs" > "$out/ab.log" 2> "$out/ab.err"
echo "variants: rc $?"; grep '^|\|MISMATCH' "$out/ab.log"
