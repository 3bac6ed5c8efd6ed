#!/usr/bin/env bash
# The tuning workflow on mytorch's training step: run the step benchmark untuned (its calls are
# recorded as missed keys), `kernelzoo tune --pending`, run it again on the winners, export them.
# On the lent GPU: `. .whl/env.sh && scripts/gpu_mytorch_tune.sh [tune options]` (logs under $OUT).
set -uo pipefail
out=${OUT:-/tmp/kernelzoo-gpu-mytorch-tune}
mkdir -p "$out"
. "$(dirname "$0")/gpu_common.sh"  # bundle_logs
export KERNELZOO_DB="sqlite:///$out/tuning.db"
python3 scripts/mytorch_bench.py --out "$out" > "$out/before.txt" 2>&1 || { cat "$out/before.txt"; exit 1; }
kernelzoo doctor > "$out/doctor-before.txt" 2>&1
start=$SECONDS
kernelzoo tune --pending -v --quiet "$@" > "$out/tune.txt" 2>&1
echo "tune --pending $*: rc=$? in $((SECONDS - start)) s" > "$out/tune-time.txt"
kernelzoo show --json > "$out/winners.json" 2>/dev/null
python3 scripts/mytorch_bench.py --out "$out" > "$out/after.txt" 2>&1
kernelzoo doctor > "$out/doctor-after.txt" 2>&1
python3 scripts/mytorch_profile.py --out "$out" > "$out/profile.txt" 2>&1
{ tail -n 22 "$out/after.txt"; cat "$out/tune-time.txt"
  echo "before: $(tail -n 1 "$out/before.txt")"; echo "after:  $(tail -n 1 "$out/after.txt")"
  tail -n 2 "$out/profile.txt"; } > "$out/summary.txt"
cat "$out/summary.txt"
bundle_logs

