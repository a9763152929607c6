#!/bin/bash
# shellcheck disable=SC2016  # single-quoted $HOME must reach the guest literally
# Lab harness self-test: compiles selftest/lab_hello.rs on the host into $LAB/bin, runs it
# inside the guest through guest/exec.sh with arguments and environment, and checks from
# the host that (1) it ran on the lab kernel, (2) arguments and an environment variable with spaces
# and shell metacharacters arrived intact, (3) it wrote a file back through $LAB_OUT, and (4) a non-zero
# exit inside the guest makes run.sh report "test failed" (exit 1). Two boots, ~25 s.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
lab_load_kernel
fail() { echo "selftest: FAILED: $*"; exit 1; }

mkdir -p "$LAB/bin"
BIN=$LAB/bin/lab-hello
# Build before booting: 9p cache=loose may hide a binary rewritten while a guest runs.
if [ ! -x "$BIN" ] || [ "$HERE/selftest/lab_hello.rs" -nt "$BIN" ]; then
  rustc --edition 2021 -O -o "$BIN.tmp" "$HERE/selftest/lab_hello.rs" || fail "rustc lab_hello.rs"
  mv "$BIN.tmp" "$BIN"
fi

# the single-quoted $HOME must reach the guest literally
TOKEN="tok-$$-$RANDOM  spaced *"
RUN=$LAB/runs/selftest-$(date +%Y%m%d-%H%M%S)-$$
"$HERE/run.sh" -q -t 300 -o "$RUN" -e LAB_HELLO_TOKEN="$TOKEN" \
  "$HERE/guest/exec.sh" "$BIN" "first arg" '$HOME;*' || fail "run.sh exited $? for a passing program"
LOG=$RUN/guest.log
grep -qx "lab_hello: kernel=$KV" "$LOG" || fail "did not run on the lab kernel $KV (host is $(uname -r))"
grep -qxF 'lab_hello: arg[1]=first arg' "$LOG" || fail "argument with a space mangled"
grep -qxF 'lab_hello: arg[2]=$HOME;*' "$LOG" || fail "argument with shell metacharacters mangled"
grep -qxF "lab_hello: token=$TOKEN" "$LOG" || fail "environment variable not passed"
grep -qxF "token=$TOKEN" "$RUN/lab_hello.txt" 2>/dev/null || fail "no file written back through \$LAB_OUT"
sed 's/^/  /' "$LOG"

RUN2=$RUN-fail
"$HERE/run.sh" -q -t 300 -o "$RUN2" -e LAB_HELLO_EXIT=7 "$HERE/guest/exec.sh" "$BIN" >"$RUN2.out" 2>&1
RC=$?
[ "$RC" = 1 ] || { cat "$RUN2.out"; fail "a guest program exiting 7 gave run.sh exit $RC, want 1"; }
[ "$(cat "$RUN2/rc")" = 7 ] || fail "guest rc file says $(cat "$RUN2/rc"), want 7"
echo "selftest: PASS (host-built binary ran on $KV; failure status propagated)"
