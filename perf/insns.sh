#!/usr/bin/env bash
# Instruction counts of the hot paths under callgrind: one 32-byte shm Send/Recv round
# trip (the raw fabric) and one inline RPC round trip (NULL and ECHO-64) through the
# engine over shm, both ends driven by one thread. Counts are deterministic for a given
# binary, so unlike wall-clock numbers on a shared machine they make a regression guard.
#
# usage: perf/insns.sh            # prints instructions per round trip and the RPC/fabric ratio
# env:   INSNS_BUDGET_SHM, INSNS_BUDGET_RPC  fail above these (defaults: shm ~25% over the
#        1487 measured when the script was written; RPC ~5% over the NULL count after the
#        copy-free call path (requests borrowed, outcomes and replies built in place, no
#        filled placeholder arrays, per-poll fast paths), 7548 (it was 8559; ECHO 9295 ->
#        8073)); raised to 8100 (1.25% over 8000) when message continuation, the RFC 8167
#        backward direction, the selective-signaling ledger and RDMA_MSGP each added a
#        check to the NULL path (7820 -> 8000 together), so that any further creep fails);
#        lowered to 7330 (1.4% over 7231) after fast paths for the common headers
#        (AUTH_NONE decode, AUTH_NONE call and SUCCESS reply encode, chunkless
#        transport header parse: 8000 -> 7584; chunkless transport header encode
#        -> 7476, program number and versions kept at registration -> 7461) and the
#        driver loop taking message buffers from a per-connection cache and giving
#        outcomes' buffers back to the caches (Requester::take_msg/recycle) -> 7231;
#        lowered to 6870 (1.5% over 6770) after one clock read per driver turn
#        (Requester::submit_at) and the dispatcher's registered-result list left alone
#        while empty (-> 7201), outcomes read where the engine keeps them
#        (Requester::poll_outcome_with: no move out and back, -> 7051), the chunkless
#        header lists and empty AUTH_NONE inlined (-> 6879), and the buffer-cache,
#        credit and XID helpers inlined -> 6770; raised to 7050 (1.5% over 6947) when
#        that work met the shared-receive-queue ledger (+16 alone: a grant recorded per
#        reply, a count per call) and send-based DDP's receive plumbing (two-entry
#        receive chain entries, a segment check per receive; the rest of the 6947, not
#        yet attributed call by call); lowered to 6800 (2% over 6670) after the
#        chunkless inline reply's header written directly (stage_plain_reply with
#        encode_plain_msg, 6961 -> 6759) and the chunkless call's inspection inlined
#        (the walk over chunks out of line, -> 6670); lowered to 6670 (2% over 6540)
#        after RecvTable::complete and RegBuf::release_into inlined (-> 6540);
#        raised to 6790 (2% over 6652) when merged with send-based DDP replies (a
#        reply direction check per call) and the shm CQ's two passes (send sides
#        before receive sides: the parked-client collapse fix); lowered to 6225 (1.5%
#        over 6134) after buffers without a pool handle each (RegBuf: no two reference
#        counts per buffer taken and given back, 6724 -> 6552), the chunkless RDMA_MSG
#        header parsed in one look (-> 6397), the AUTH_NONE call header decoded in one
#        look (-> 6300), a short call message copied behind its transport header, one
#        gather entry instead of two (-> 6222), and the same for a short reply body
#        written in a large buffer (-> 6134); lowered to 4630 (1.5% over 4562) after both sides'
#        plain paths: the requester's (core/requester/plain.rs: an inline chunkless
#        call and its chunkless reply in one pass each, 6175 -> 5459), a call made
#        one at a time posted at submit (-> 4878), and the responder's
#        (responder/plain.rs, the ULP dispatcher's plain call header decoded in place,
#        no Write chunk table for a call without Write chunks, the cold
#        release_sinks: 6175 -> 5864 alone); merged: 4562; lowered to 4470 (1.5% over
#        4403) after a plain call's receive reposted in place and its reply's body
#        buffer kept (-> 4500), one-entry Send staging, outcomes without drop glue and
#        owner-only credit updates (-> 4476); merged with the CM pacer's back-off: 4403;
#        lowered to 4275 (1.5% over 4211) after the ULP's answer without a Write list
#        and in-place argument cursor (-> 4281 alone), the requester's reply buffer
#        reposted into its own slot (-> 4349 alone), merged 4225, and shm's copy of
#        33-128 octets by fixed moves (-> 4211); lowered to 3980 (1.5% over 3920) after
#        the responder serving a chunkless inline call straight after its parse (4211 ->
#        4166 alone) and the shm provider's one-queue-pair CQ poll and inline-Send post
#        fast path (-> 3966 alone; the like-for-like baseline 2096 -> 1818, so the ratio
#        rose to x2.16: the provider is what the baselines run too), merged 3920; lowered to 3795 (1.6%
#        over 3736) after the responder's plain reply written in its spare buffer where
#        it lies, one-entry reply Sends staged inline, the release and grant inlined into
#        the reply's completion, the ULP dispatcher's bare NULL and its handle_call
#        inlined (3920 -> 3766 alone), and the requester's submit inlined into the
#        connection's (-> 3890 alone); merged 3736 (x2.05 like-for-like); lowered to
#        3555 (1.5% over 3501) after the responder's plain answer staged without a
#        second look at its context, short bodies copied by fixed moves and its Send
#        completion inlined (-> 3635 alone), and the requester's outcome made in its
#        queue place, the one-receive/one-Send transmit without chunk loops and the
#        plain reply taken in the completion loop (-> 3602 alone); merged 3501 (x1.93
#        like-for-like: the <= 2x target met).
# The rate region: inline ECHO calls of 64 octets with 32 in flight (`rpcrdma-perf rate
# --size 64 --depth 32`'s loop and configuration, both ends polled in turn from one
# thread), instructions per finished call, beside the fabric request/response at depth 32
# counted the same way (`rpcrdma-perf rate --baseline`'s req/resp loop: each request a
# signaled Send answered by a signaled Send, per answer). INSNS_BUDGET_RATE fails above it:
# 5270, 2% over the 5166 measured after a CQ batch went to the core in one call and post
# chains were built without blank-filling (5292 before; the req/resp baseline 1292);
# lowered to 4190 (1.5% over 4125) after both sides' plain paths and XDR padding zeroed without
# memset (5213 -> 4497 requester alone, -> 4807 responder alone; merged: 4125); lowered
# to 4040 (1.5% over 3979) after the same steps as the NULL budget's last (4125 -> 3979);
# lowered to 3865 (1.5% over 3807) after the same steps as the NULL budget's last;
# lowered to 3645 (1.6% over 3588) after the same steps as the NULL budget's last (the
# req/resp baseline 1278 -> 1067); lowered to 3465 (1.5% over 3413) after the same
# steps as the NULL budget's last; lowered to 3325 (1.6% over 3273) after the same
# steps as the NULL budget's last. INSNS_BUDGET_SHM lowered from 1900 to 1380 (1.7% over
# the 1357 of the shm provider's fast paths), so the baseline's own cost is guarded too.
# 2026-11-28, second round: NULL 3487, rate region 3229, shm 1355 (CQ_BATCH 64, the shm
# copy of 129-160 octets): budgets 3540, 3280 and 1375 (about 1.5% over each).
# 2026-11-28, third round: NULL 3485, ECHO 3916, rate region 3191 (a batch of replies
# restocked with their own buffers, RecvTable::short_by_at_most; the responder's Sends
# before its restocks on shm; ECHO's own small Program::call): budgets 3535 and 3240.
# Fourth round (issue 14): the responder's chains filled in one loop, the ULP's short
# opaques, AUTH_NONE call header and plain-reply check in one look each, siw untouched
# here: NULL 3481 -> 3413, rate 3190 -> 2953 (x2.78): budgets 3465 and 3000.
# Fifth round: the requester's credit updates and call-Send completion inlined, the
# completions every call has dispatched by their kind bits first (WrId::of_raw), the
# plain call's message copied by copy_short: NULL 3422 -> 3346, rate 2953 -> 2847
# (x2.68): budgets 3400 and 2890.
# The second shm baseline is like-for-like with the engine's default: every Send
# signaled and its completion reaped (the first signals one Send in 16).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "perf/insns.sh: valgrind is missing (apt-get install valgrind)"; exit 1; }
BUDGET_SHM=${INSNS_BUDGET_SHM:-1375}
BUDGET_RPC=${INSNS_BUDGET_RPC:-3400}
BUDGET_RATE=${INSNS_BUDGET_RATE:-2890}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

bench_bin() {
  cargo bench -q -p rpcrdma-perf --bench "$1" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]==sys.argv[1]:
        print(m["executable"])' "$1" | tail -n 1
}

# Inclusive instruction count of the functions matching $2 in callgrind output $1.
inclusive() {
  callgrind_annotate --inclusive=yes "$1" 2>/dev/null | grep -E "$2" | head -n 1 |
    awk '{gsub(",","",$1); print $1}'
}

shm=$(bench_bin fabric_shm_insns)
rpc=$(bench_bin engine_rpc_insns)
valgrind -q --tool=callgrind --toggle-collect='*measured_round_trips*' \
  --callgrind-out-file="$out/shm.cg" "$shm" >/dev/null
valgrind -q --tool=callgrind --toggle-collect='*measured_signaled*' \
  --callgrind-out-file="$out/shm_sig.cg" "$shm" >/dev/null
valgrind -q --tool=callgrind --toggle-collect='*measured_null*' --toggle-collect='*measured_echo*' \
  --callgrind-out-file="$out/rpc.cg" "$rpc" >/dev/null
valgrind -q --tool=callgrind --toggle-collect='*measured_req_resp*' \
  --callgrind-out-file="$out/req_resp.cg" "$shm" >/dev/null
valgrind -q --tool=callgrind --toggle-collect='*measured_rate*' \
  --callgrind-out-file="$out/rate.cg" "$rpc" >/dev/null

rounds=$(grep -Eo 'const ROUNDS: u64 = [0-9_]+' perf/benches/fabric_shm_insns.rs | grep -Eo '[0-9_]+$' | tr -d _)
calls=$(grep -Eo 'const CALLS: u64 = [0-9_]+' perf/benches/engine_rpc_insns.rs | grep -Eo '[0-9_]+$' | tr -d _)
rate_ops=$(grep -Eo 'const RATE_OPS: u64 = [0-9_]+' perf/benches/fabric_shm_insns.rs | grep -Eo '[0-9_]+$' | tr -d _)
rate_calls=$(grep -Eo 'const RATE_CALLS: u64 = [0-9_]+' perf/benches/engine_rpc_insns.rs | grep -Eo '[0-9_]+$' | tr -d _)
shm_ir=$(inclusive "$out/shm.cg" 'measured_round_trips')
sig_ir=$(inclusive "$out/shm_sig.cg" 'measured_signaled')
null_ir=$(inclusive "$out/rpc.cg" 'measured_null')
echo_ir=$(inclusive "$out/rpc.cg" 'measured_echo')
rr_ir=$(inclusive "$out/req_resp.cg" 'measured_req_resp')
rate_ir=$(inclusive "$out/rate.cg" 'measured_rate')
[ -n "$shm_ir" ] && [ -n "$sig_ir" ] && [ -n "$null_ir" ] && [ -n "$echo_ir" ] &&
  [ -n "$rr_ir" ] && [ -n "$rate_ir" ] || { echo "perf/insns.sh: could not read callgrind totals"; exit 1; }

python3 - "$shm_ir" "$sig_ir" "$rounds" "$null_ir" "$echo_ir" "$calls" "$BUDGET_SHM" "$BUDGET_RPC" \
  "$rr_ir" "$rate_ops" "$rate_ir" "$rate_calls" "$BUDGET_RATE" <<'PY'
import sys
(shm_ir, sig_ir, rounds, null_ir, echo_ir, calls, bshm, brpc,
 rr_ir, rate_ops, rate_ir, rate_calls, brate) = map(int, sys.argv[1:])
shm, sig, null, echo = shm_ir / rounds, sig_ir / rounds, null_ir / calls, echo_ir / calls
rr, rate = rr_ir / rate_ops, rate_ir / rate_calls
print(f"instructions per round trip: shm 32 B send/recv {shm:8.0f}   (one Send in 16 signaled)")
print(f"                             shm like-for-like {sig:8.0f}   (every Send signaled and reaped, as the engine)")
print(f"                             rpc NULL          {null:8.0f}   x{null/shm:.2f} of shm, x{null/sig:.2f} like-for-like")
print(f"                             rpc ECHO 64 B     {echo:8.0f}   x{echo/shm:.2f} of shm, x{echo/sig:.2f} like-for-like")
print(f"at depth 32, per operation:  shm req/resp 64 B {rr:8.0f}   (each request and answer a signaled Send)")
print(f"                             rpc ECHO 64 B     {rate:8.0f}   x{rate/rr:.2f} of req/resp")
bad = []
if shm > bshm: bad.append(f"shm round trip {shm:.0f} > budget {bshm}")
if null > brpc: bad.append(f"rpc NULL {null:.0f} > budget {brpc}")
if rate > brate: bad.append(f"rpc ECHO at depth 32 {rate:.0f} > budget {brate}")
if bad:
    print("instruction budget exceeded: " + "; ".join(bad)); sys.exit(1)
PY
