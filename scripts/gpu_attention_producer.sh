#!/usr/bin/env bash
# One device call for branch wgmma-producer (not yet run on a GPU): the warpgroup forward with a producer warp and
# mbarriers (PRODUCER 1), and without the per-tile proxy fence (PROXY_FENCE 0). First the odd-shape checks against
# float64 (attention_cuda_check.py: two PRODUCER configs among the forward's), then each define at 0 and 1 over the
# warpgroup configs in the same rounds (attention_wgmma_ab.py).      . .whl/env.sh && scripts/gpu_attention_producer.sh
set -uo pipefail
out=${OUT:-/tmp/kz-out}
mkdir -p "$out"
python3 scripts/attention_cuda_check.py --skip-timing > "$out/check.log" 2>&1
rc=$?
echo "attention_cuda_check: rc $rc, $(grep -c '^ok' "$out/check.log") ok, $(grep -c '^FAIL\|^ERROR' "$out/check.log") failed"
grep -m 5 '^FAIL\|^ERROR\|Traceback' "$out/check.log"
[ $rc = 0 ] || exit 1
python3 scripts/attention_wgmma_ab.py --define PRODUCER --configs 64/128/4/2,64/64/4/2,128/128/8/3,128/128/8/2,128/64/8/3 \
    > "$out/ab_producer.log" 2> "$out/ab_producer.err"
echo "PRODUCER: rc $?"; grep '^|\|MISMATCH' "$out/ab_producer.log"
python3 scripts/attention_wgmma_ab.py --define PROXY_FENCE --configs 64/128/4/2,128/128/8/3,192/128/12/2 \
    > "$out/ab_fence.log" 2> "$out/ab_fence.err"
echo "PROXY_FENCE: rc $?"; grep '^|\|MISMATCH' "$out/ab_fence.log"
