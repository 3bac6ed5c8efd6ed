#!/usr/bin/env bash
# One device call: re-tune the cuda plugins of attention (float16 and bfloat16) and attention_backward (float16)
# at the representative shapes into a fresh database and export their records to $OUT/cuda.json, for tuning_db/
# once merged.      . .whl/env.sh && scripts/gpu_attention_cuda_tune.sh
# OPS: the ops (default both); FWD_TRIALS, BWD_TRIALS: trials per key; CHECK=1 first runs attention_cuda_check.py
# --skip-timing (odd shapes against float64) and stops on a mismatch.
set -uo pipefail
out=${OUT:-/tmp/kz-out}
mkdir -p "$out"
export KERNELZOO_DB="sqlite:///$out/tune.db"
. scripts/gpu_common.sh
if [ "${CHECK:-0}" = 1 ]; then
    attention_check || exit 1
fi
start=$SECONDS
for op in ${OPS:-attention attention_backward}; do
    if [ "$op" = attention ]; then
        kernelzoo tune --op attention --plugin cuda --trials "${FWD_TRIALS:-8}" -v --quiet >> "$out/tune.log" 2>&1
    else
        kernelzoo tune --op "$op" --dtype float16 --plugin cuda --trials "${BWD_TRIALS:-8}" -v --quiet >> "$out/tune.log" 2>&1
    fi
    echo "$op cuda: rc $?, $((SECONDS - start)) s"
done
kernelzoo db export "$out/cuda.json" >> "$out/tune.log" 2>&1
python3 - "$out/cuda.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["records"]:
    print(f"{r['op']:18s} {r['dtype']:8s} {r['shape']:16s} {r['time_ms']:8.3f} ms  {r['config']}")
PY
