#!/usr/bin/env bash
# The layer ops' GPU goals in one device call: tune the ops on a fresh database, then benchmark them against
# torch in one run, with the copy bandwidth measured in the same run (--calibrate) as the floor.
#     . .whl/env.sh && scripts/gpu_layer_ops.sh memory     # layer_norm(+backward), cross_entropy(+backward),
#                                                          # adam_update_, sgd_update_: float32
#     . .whl/env.sh && scripts/gpu_layer_ops.sh layer_norm # layer_norm(+backward) alone: float32
#     . .whl/env.sh && scripts/gpu_layer_ops.sh conv       # conv2d: float16
#     . .whl/env.sh && scripts/gpu_layer_ops.sh conv_backward  # conv2d_backward: bfloat16
# TRIALS trials per plugin and key (default 12), BUDGET_MS per trial (default 40). Under $OUT: tuning.db,
# layer-ops.tgz (bench JSON and plots, tune and bench logs) and summary.txt (the bench tables). Then:
#     mkdir -p /tmp/gpu && tar -xzf FILES_AT/layer-ops.tgz -C /tmp/gpu && python scripts/perf_docs.py --gpu /tmp/gpu
set -uo pipefail
group=${1:?usage: gpu_layer_ops.sh memory|layer_norm|conv|conv_backward}
out=${OUT:-/tmp/kernelzoo-layer-ops}
res=$(mktemp -d)
mkdir -p "$out"
export KERNELZOO_DB="sqlite:///$out/tuning.db"
case $group in
    memory) ops=(layer_norm layer_norm_backward cross_entropy cross_entropy_backward adam_update_ sgd_update_)
            dtype=float32 ;;
    layer_norm) ops=(layer_norm layer_norm_backward) dtype=float32 ;;
    conv) ops=(conv2d) dtype=float16 ;;
    conv_backward) ops=(conv2d_backward) dtype=bfloat16 ;;
    *) echo "unknown group $group" >&2; exit 2 ;;
esac
start=$SECONDS
for op in "${ops[@]}"; do
    timeout "${OP_TIMEOUT:-200}" kernelzoo tune --op "$op" --device cuda --plugin triton --plugin cuda --plugin torch \
        --dtype "$dtype" --trials "${TRIALS:-12}" --budget-ms "${BUDGET_MS:-40}" -v --quiet >>"$res/tune.log" 2>&1
    echo "tune $op: exit $? at $((SECONDS - start)) s" | tee -a "$res/tune.log"
done
bench=(kernelzoo bench --device cuda --calibrate --budget-ms 25 --max-run-ms 250 --plugin triton --plugin cuda
       --plugin torch --dtype "$dtype" --output "$res/{op}.json" --plot "$res/{op}.png")
for op in "${ops[@]}"; do bench+=(--op "$op"); done
timeout "${BENCH_TIMEOUT:-240}" "${bench[@]}" >"$res/bench.txt" 2>&1
echo "bench: exit $? at $((SECONDS - start)) s" | tee -a "$res/tune.log"
cp "$res/bench.txt" "$out/summary.txt"
tar -czf "$out/layer-ops.tgz" -C "$res" .
