#!/usr/bin/env bash
# One device call for the cuda forward's warpgroup-MMA kernel (WGMMA 1, sm_90a): every config against the float64
# reference on odd shapes (attention_cuda_check.py, fp16 and bf16), then every forward config that fits timed
# against FA2 and cuDNN at B=4 H=32 N=4096 (--sweep-forward).        . .whl/env.sh && scripts/gpu_attention_wgmma.sh
set -uo pipefail
out=${OUT:-/tmp/kz-out}
mkdir -p "$out"
python3 scripts/attention_cuda_check.py --skip-timing --sweep-forward > "$out/check.log" 2>&1
rc=$?
echo "attention_cuda_check: rc $rc, $(grep -c '^ok' "$out/check.log") ok, $(grep -c '^FAIL\|^ERROR' "$out/check.log") failed"
grep -m 5 '^FAIL\|^ERROR\|Traceback' "$out/check.log"
grep -A 8 '^fwd D=' "$out/check.log" | cut -c1-110
tail -n 3 "$out/check.log"
