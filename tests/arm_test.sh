#!/usr/bin/env bash
# tests/arm_test.sh ARM_BUILD HOST_PADDOCK: the AArch64 build (scripts/cross-build aarch64) run
# under user-mode emulation, qemu-aarch64-static: `-cpu max` (dot products, int8 matrix
# multiply, bf16, SVE) and `-cpu cortex-a72` (ARMv8.0: NEON alone). Correctness only: emulated
# time says nothing about an ARM core's.
#   1. The kernel tests (every kernel against the scalar reference: every weight type, tile
#      tails, odd sizes) at every level each CPU runs: neon, dotprod and i8mm on max, neon on
#      the A72.
#   2. stories260K's greedy golden with --isa neon, dotprod and i8mm on max and the automatic
#      choice on the A72; `paddock info --devices` names the level chosen.
#   3. Q8_0 and Q4_0 files quantized from stories260K (by the host's paddock): perplexity under
#      emulation within 0.1% of the host's on the same text.
#   4. One server start answering a completion, the same text as the host's CLI.
set -uo pipefail
ARM=$(cd "$1" && pwd)
HOST=$2
BIN=""  # set per server below
source "$(dirname "$0")/lib.sh"

qmax() { qemu-aarch64-static -cpu max "$@"; }
qa72() { qemu-aarch64-static -cpu cortex-a72 "$@"; }

# 1. kernel tests, the two CPUs at once (one core each)
qmax "$ARM/paddock_kernel_tests" --gtest_brief=1 >"$TMP/kmax.log" 2>&1 &
kmax=$!
qa72 "$ARM/paddock_kernel_tests" --gtest_brief=1 >"$TMP/ka72.log" 2>&1 &
ka72=$!
for cpu in max a72; do
  pid=kmax
  [ $cpu = a72 ] && pid=ka72
  if wait "${!pid}"; then
    ok "kernel tests on $cpu ($(grep -o '[0-9]* tests from [0-9]* test suites ran' "$TMP/k$cpu.log"))"
  else
    fail "kernel tests on $cpu" "$(grep -E 'FAILED|Failure' "$TMP/k$cpu.log" | head -n 8)"
  fi
done

# The instruction mix, from the disassembly: the dotprod level's Q4_0 one-token tile (the decode
# GEMV; in GemmX16 where GCC inlines it) on SDOT, the i8mm level's 8-token prefill tile on SMMLA, and no
# instruction past ARMv8.0 in the neon level's code (its table runs on the A72).
aarch64-linux-gnu-objdump -d --no-show-raw-insn -C "$ARM/paddock" >"$TMP/dis.txt"
count() {  # count FUNCTION-REGEX INSN-REGEX: the instructions matching in the functions matching
  awk -v f="$1" -v i="$2" '/^[0-9a-f]+ </ { in_f = ($0 ~ f) } in_f && $2 ~ i { n++ } END { print n + 0 }' \
    "$TMP/dis.txt"
}
expect_count() {  # expect_count NAME FUNCTION-REGEX INSN-REGEX OP N: the count compared by OP
  local n
  n=$(count "$2" "$3")
  [ "$n" "$4" "$5" ]
  check "$1 ($n)" $?
}
expect_count "dotprod's Q4_0 decode GEMV uses SDOT" \
  'paddock::dotprod::.*(GemmX16<\(paddock::X16Kind\)0, 32, true>|X16Tile<\(paddock::X16Kind\)0, 32, 1, true>)' \
  '^sdot$' -gt 0
expect_count "i8mm's Q4_0 8-token prefill tile uses SMMLA" \
  'paddock::i8mm::.*X16Tile<\(paddock::X16Kind\)0, 32, 8, true>' '^smmla$' -gt 0
expect_count "i8mm's Q8_0 8-token prefill tile uses SMMLA" \
  'paddock::i8mm::.*X16Tile<\(paddock::X16Kind\)2, 32, 8, true>' '^smmla$' -gt 0
expect_count "the neon level has no ARMv8.2+ dot or matrix instruction" 'paddock::neon::' \
  '^(sdot|udot|usdot|sudot|smmla|ummla|usmmla|bfmmla|bfdot)$' -eq 0

# 2. the golden
golden() {  # golden NAME QEMU-FN ARGS...
  local name=$1 fn=$2
  shift 2
  "$fn" "$ARM/paddock" run -m "$M/stories260K.bin" -z "$M/tok512.bin" --temp 0 -n 256 "$@" \
    >"$TMP/g.txt" 2>"$TMP/g.err"
  if cmp -s "$TMP/g.txt" "$M/stories260K.expected_t0.txt"; then
    ok "$name"
  else
    fail "$name" "$(tail -n 2 "$TMP/g.err"; head -c 200 "$TMP/g.txt")"
  fi
}
for isa in neon dotprod i8mm; do golden "stories260K golden, --isa $isa on max" qmax --isa "$isa"; done
golden "stories260K golden, automatic level on cortex-a72" qa72
grep -q "neon kernels" "$TMP/g.err"
check "the A72's run names the neon kernels" $? "$(head -n 1 "$TMP/g.err")"
qmax "$ARM/paddock" info --devices >"$TMP/info.txt" 2>&1
grep -q "i8mm kernels" "$TMP/info.txt"
check "paddock info names i8mm on max" $? "$(cat "$TMP/info.txt")"
qa72 "$ARM/paddock" info --devices >"$TMP/info.txt" 2>&1
grep -q "neon kernels (features: asimd)" "$TMP/info.txt"
check "paddock info names neon on cortex-a72" $? "$(cat "$TMP/info.txt")"
qa72 "$ARM/paddock" run -m "$M/stories260K.bin" -z "$M/tok512.bin" -n 4 --isa i8mm >/dev/null 2>"$TMP/e.txt"
grep -q "cannot run i8mm" "$TMP/e.txt"
check "the A72 refuses --isa i8mm by name" $? "$(cat "$TMP/e.txt")"

# 3. quantized perplexity, host against emulated, over 32 stories the model tells (sampled on
# the host's scalar reference: the same text on every x86 machine; about 5,400 tokens, enough
# that the kernel families' different summation orders average out: a 260K model with int8
# activations moves its perplexity by ~0.1% on a 126-token text between AVX2 and AVX-512).
text=$TMP/stories.txt
for seed in $(seq 1 32); do
  "$HOST" run -m "$M/stories260K.gguf" -n 400 --temp 0.8 --seed "$seed" --isa scalar 2>/dev/null
  echo
done >"$text"
ppl() {  # ppl FILE RUNNER... -> the perplexity
  local file=$1
  shift
  "$@" perplexity -m "$file" -f "$text" --ctx 128 --json 2>/dev/null | json_get 'd["ppl"]'
}
for type in q8_0 q4_0; do
  "$HOST" quantize "$M/stories260K.gguf" "$TMP/$type.gguf" --type "$type" >/dev/null 2>&1
  ppl "$TMP/$type.gguf" "$HOST" >"$TMP/$type.host"
done
# (on max, the i8mm level; the A72's neon level gives the same bits, every level's integer sums
# being exact, as the golden shows per level)
ppl "$TMP/q8_0.gguf" qmax "$ARM/paddock" >"$TMP/q8_0.max" &
ppl "$TMP/q4_0.gguf" qmax "$ARM/paddock" >"$TMP/q4_0.max" &
wait
for run in q8_0.max q4_0.max; do
  type=${run%.*}
  got=$(cat "$TMP/$run") want=$(cat "$TMP/$type.host")
  python3 -c "import sys; g, w = float('$got'), float('$want'); sys.exit(abs(g - w) / w > 1e-3)" \
    2>/dev/null
  check "$type perplexity on ${run#*.} within 0.1% of the host's ($got vs $want)" $?
done

# 4. one server
cat >"$TMP/paddock-arm" <<EOF
#!/bin/sh
exec qemu-aarch64-static -cpu max "$ARM/paddock" "\$@"
EOF
chmod +x "$TMP/paddock-arm"
BIN=$TMP/paddock-arm
if start_server arm -m "$M/stories260K.gguf"; then
  got=$(complete "" "Once upon a time" 24)
  want=$("$HOST" run -m "$M/stories260K.gguf" -p "Once upon a time" -n 24 --temp 0 2>/dev/null)
  expect_eq "the emulated server's completion equals the host's" "Once upon a time$got" "$want"
  stop_server "$SPID"
  check "the server stops on SIGTERM" $?
else
  fail "the emulated server starts"
fi

finish "aarch64 under qemu"
