#!/bin/sh
# A stand-in for trtexec in tests/unit/autotune/test_trtexec.c: writes its arguments, one a
# line, to $FAKE_TRTEXEC_ARGS (when set), then prints --iterations=N per-inference trace lines
# in trtexec's format (host latency 1.000, 1.001, ... ms) and the performance summary.
n=1
for a in "$@"; do
    [ -n "$FAKE_TRTEXEC_ARGS" ] && printf '%s\n' "$a" >> "$FAKE_TRTEXEC_ARGS"
    case "$a" in --iterations=*) n="${a#--iterations=}" ;; esac
done
echo "&&&& RUNNING TensorRT.trtexec [TensorRT v100300] # trtexec $*"
echo "[12/05/2026-09:14:10] [I] === Trace details ==="
echo "[12/05/2026-09:14:10] [I] Trace averages of 1 runs:"
i=0
while [ "$i" -lt "$n" ]; do
    printf '[12/05/2026-09:14:10] [I] Average on 1 runs - GPU latency: 0.9 ms - Host latency: 1.%03d ms (enqueue 0.2 ms)\n' "$i"
    i=$((i + 1))
done
echo "[12/05/2026-09:14:10] [I] === Performance summary ==="
echo "[12/05/2026-09:14:10] [I] Throughput: 990.1 qps"
echo "[12/05/2026-09:14:10] [I] Latency: min = 1.0000 ms, max = 1.0100 ms, mean = 1.0050 ms, median = 1.0050 ms, percentile(90%) = 1.0090 ms, percentile(95%) = 1.0100 ms, percentile(99%) = 1.0100 ms"
echo "&&&& PASSED TensorRT.trtexec [TensorRT v100300] # trtexec $*"
