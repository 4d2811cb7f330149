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
