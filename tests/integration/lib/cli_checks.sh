# Shared by the shell end-to-end tests (sourced): a scratch folder $T removed on exit, fail MSG
# (counted in $fails) and expect RC CMD... (runs CMD with stdout in $T/out and stderr in
# $T/err, and fails unless it exits RC).
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() {
    local want=$1
    shift
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" != "$want" ]; then
        fail "exit $rc (want $want): $*"
        cat "$T/err"
    fi
}
# interrupt_when_racing PID ERRFILE: sends SIGINT to the autotune search PID once ERRFILE holds
# its first progress line (a race done, so the handler is installed and the state file written),
# or once PID has ended; at most 120 s. A fixed sleep instead could, on a loaded machine,
# signal the process before its handler is installed and kill it without its message.
interrupt_when_racing() {
    for _ in $(seq 1200); do
        grep -q '^autotune: pattern' "$2" 2>/dev/null && break
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -INT "$1"
}
