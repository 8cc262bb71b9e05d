# The helpers of the tests/run/check_*.sh scripts, sourced by them after
# they set `tmp` (a scratch folder) and `failed=0`.

# fail WHAT: says what failed, and the script's status will be 1.
fail() {
    echo "FAIL: $*" >&2
    failed=1
}

# run CMD...: runs it with stdout in $out, stderr in $err, status in $rc.
run() {
    out=$("$@" 2>"$tmp/stderr")
    rc=$?
    err=$(cat "$tmp/stderr")
}
