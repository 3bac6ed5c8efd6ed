#!/usr/bin/env bash
# Every op's benchmarks on this CPU in float32 (the dtype every CPU plugin takes), for docs/perf's CPU
# sections; ~10 minutes on 2 idle cores, more when other work shares them (the pages note the load):
#   scripts/cpu_bench.sh [DIR] && python scripts/perf_docs.py --cpu DIR
set -uo pipefail
res=${1:-/tmp/kernelzoo-cpu-bench}
mkdir -p "$res"
# A database of its own: the ceilings measured at the start of this run, every plugin on its default config.
export KERNELZOO_DB="sqlite:///$res/tuning.sqlite"
ops=$(python3 -c "import kernelzoo; print(' '.join(sorted(kernelzoo.registry.load().ops)))")
args=()
for op in $ops; do args+=(--op "$op"); done
# 10 s a run lets the python plugins' matmuls be timed, 3 runs each (1024^3: 4.5 s a run on 2 busy cores)
kernelzoo bench --device cpu --dtype float32 "${args[@]}" --output "$res/{op}.json" --plot "$res/{op}.png" \
    --budget-ms 200 --max-run-ms 10000 2>&1 | tee "$res/bench.log"
python3 examples/gelu_fusion.py --device cpu --out "$res/gelu_fusion.md" 2>&1 | tee -a "$res/bench.log"
python3 -m pytest benchmarks/ --benchmark-only -k "softmax and float32" --bench-device cpu -q -p no:cacheprovider \
    --benchmark-json "$res/pytest_softmax.json" 2>&1 | tail -n 3
python3 scripts/perf_docs.py --summary "$res"
