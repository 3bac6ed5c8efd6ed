#!/usr/bin/env bash
# Every op's benchmarks on this CPU in float32 (the dtype every CPU plugin takes), for docs/perf's CPU
# sections; ~10 minutes on 2 idle cores, more when other work shares them (the pages note the load):
#   scripts/cpu_bench.sh [DIR] && python scripts/perf_docs.py --cpu DIR
set -uo pipefail
res=${1:-/tmp/kernelzoo-cpu-bench}
mkdir -p "$res"
ops=$(python3 -c "import kernelzoo; print(' '.join(sorted(kernelzoo.registry.load().ops)))")
args=()
for op in $ops; do args+=(--op "$op"); done
# 5 s a run lets the python plugins' matmuls (~2 s at 1024^3 on 2 cores) be timed, 3 runs each
kernelzoo bench --device cpu --dtype float32 "${args[@]}" --json "$res/{op}.json" --plot "$res/{op}.png" \
    --budget-ms 200 --max-run-ms 5000 2>&1 | tee "$res/bench.log"
python3 examples/gelu_fusion.py --device cpu --out "$res/gelu_fusion.md" 2>&1 | tee -a "$res/bench.log"
python3 -m pytest benchmarks/ --benchmark-only -k "softmax and float32" --bench-device cpu -q -p no:cacheprovider \
    --benchmark-json "$res/pytest_softmax.json" 2>&1 | tail -n 3
python3 scripts/perf_docs.py --summary "$res"
