#!/usr/bin/env bash
# One device call: re-tune the cuda plugins of attention (float16 and bfloat16) and attention_backward (float16)
# at the representative shapes into a fresh database and export their records to $OUT/cuda.json, for tuning_db/ once merged.
#     . .whl/env.sh && scripts/gpu_attention_cuda_tune.sh          (FWD_TRIALS, BWD_TRIALS: trials per key)
set -uo pipefail
out=${OUT:-/tmp/kz-out}
mkdir -p "$out"
export KERNELZOO_DB="sqlite:///$out/tune.db"
start=$SECONDS
kernelzoo tune --op attention --plugin cuda --trials "${FWD_TRIALS:-8}" --quiet > "$out/tune.log" 2>&1
echo "attention cuda: rc $?, $((SECONDS - start)) s"
kernelzoo tune --op attention_backward --dtype float16 --plugin cuda --trials "${BWD_TRIALS:-8}" --quiet >> "$out/tune.log" 2>&1
echo "attention_backward cuda: rc $?, $((SECONDS - start)) s"
kernelzoo db export "$out/cuda.json" >> "$out/tune.log" 2>&1
python3 - "$out/cuda.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["records"]:
    print(f"{r['op']:18s} {r['dtype']:8s} {r['shape']:16s} {r['time_ms']:8.3f} ms  {r['config']}")
PY
