# Shared by the scripts/gpu_*.sh scripts (sourced), which set $out first.
# run NAME COMMAND... logs COMMAND's output to $out/NAME.txt, appends a line (rc, seconds, last line
# of output) to $out/summary.txt and keeps the first non-zero rc in $status.
status=0
run() {
    local name=$1; shift
    local start=$SECONDS
    "$@" > "$out/$name.txt" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && [ $status -eq 0 ] && status=$rc
    printf '%-18s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" "$(tail -n 1 "$out/$name.txt")" >> "$out/summary.txt"
}

# bundle_logs: on the lent GPU ($OUT set), which sends back at most 8 files, leave $out with
# summary.txt, tuning.db and everything else in logs.tgz.
bundle_logs() {
    [ -n "${OUT:-}" ] || return 0
    tar -czf /tmp/kernelzoo-logs.tgz -C "$out" --exclude tuning.db . && \
        find "$out" -mindepth 1 ! -name tuning.db ! -name summary.txt -delete && mv /tmp/kernelzoo-logs.tgz "$out/logs.tgz"
}

# attention_check [ARGS...]: the cuda attention plugins against float64 on odd shapes
# (scripts/attention_cuda_check.py --skip-timing ARGS) into $out/check.log; prints the counts and the first
# failures, returns its rc.
attention_check() {
    python3 scripts/attention_cuda_check.py --skip-timing "$@" > "$out/check.log" 2>&1
    local rc=$?
    echo "attention_cuda_check: rc $rc, $(grep -c '^ok' "$out/check.log") ok, $(grep -c '^FAIL\|^ERROR' "$out/check.log") failed"
    grep -m 5 '^FAIL\|^ERROR\|Traceback' "$out/check.log"
    return $rc
}
