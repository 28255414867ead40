#!/usr/bin/env bash
# End-to-end tests of the paddock binary: golden output, stdout/stderr split, error handling.
# Usage: cli_test.sh PATH_TO_PADDOCK. Models from $PADDOCK_MODELS (default ../shared/models).
set -u
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"

# expect_error NAME EXPECTED_EXIT MESSAGE_SUBSTRING -- ARGS...
expect_error() {
  local name=$1 code=$2 msg=$3
  shift 4
  "$BIN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  local rc=$?
  if [ "$rc" -ne "$code" ]; then fail "$name" "exit $rc, expected $code"; return; fi
  if [ -s "$TMP/out" ]; then fail "$name" "wrote to stdout"; return; fi
  if [ "$(wc -l <"$TMP/err")" -ne 1 ]; then fail "$name" "error is not one line: $(cat "$TMP/err")"; return; fi
  grep -q -- "$msg" "$TMP/err" || { fail "$name" "message lacks '$msg': $(cat "$TMP/err")"; return; }
  ok "$name"
}

# The measurement commands (bench's sweep and depth runs, ablate, tune) run many engines over
# the same code the other checks reach; under a sanitizer (10-20x slower) the Release stage
# runs them and this stage keeps their error paths.
measured() { [ "${PADDOCK_SANITIZED:-0}" != 1 ]; }

# 1. Golden greedy output of the real llama2.c model (256 sampled tokens after BOS).
"$BIN" run -m "$M/stories260K.bin" -z "$M/tok512.bin" --temp 0 -n 256 >"$TMP/golden" 2>"$TMP/log"
if cmp -s "$TMP/golden" "$M/stories260K.expected_t0.txt"; then ok "golden greedy output (llama2.c)"; else fail "golden greedy output (llama2.c)" "differs from stories260K.expected_t0.txt"; fi
grep -q "tok/s" "$TMP/log"; check "timings on stderr" $?

# 2. GGUF: stdout is the prompt, then the continuation, then one newline.
"$BIN" run -m "$M/stories260K.gguf" -p "Once upon a time" --temp 0 -n 20 >"$TMP/gguf" 2>/dev/null
case "$(cat "$TMP/gguf")" in
  "Once upon a time, there was a little girl named Lily."*) ok "gguf continuation" ;;
  *) fail "gguf continuation" "$(cat "$TMP/gguf")" ;;
esac
[ "$(tail -c 1 "$TMP/gguf" | od -An -c | tr -d ' ')" = '\n' ]; check "output ends in a newline" $?

# 3. Stop strings and sampling flags.
out=$("$BIN" run -m "$M/stories260K.gguf" -p "Once upon a time" --temp 0 -n 100 --stop "Lily" 2>/dev/null)
[ "$out" = "Once upon a time, there was a little girl named " ]; check "stop string" $? "got '$out'"
a=$("$BIN" run -m "$M/stories260K.gguf" -n 30 --seed 7 --temp 1 2>/dev/null)
b=$("$BIN" run -m "$M/stories260K.gguf" -n 30 --seed 7 --temp 1 2>/dev/null)
[ "$a" = "$b" ]; check "seeded runs give the same text" $? "'$a' vs '$b'"

# 4. tokenize: --ids on a vocabulary-only GGUF, exact bytes from a file, BOS only on request.
ids=$("$BIN" tokenize -m "$M/ggml-vocab-llama-spm.gguf" --ids "Hello world")
[ "$ids" = "15043 3186" ]; check "tokenize --ids" $? "got $ids"
ids=$("$BIN" tokenize -m "$M/ggml-vocab-llama-spm.gguf" --ids --add-bos "Hello world")
[ "$ids" = "1 15043 3186" ]; check "tokenize --add-bos" $? "got $ids"
printf 'Hello\n' >"$TMP/t.txt"
ids=$("$BIN" tokenize -m "$M/stories260K.bin" -z "$M/tok512.bin" --ids -f "$TMP/t.txt")
ids2=$("$BIN" tokenize -m "$M/stories260K.gguf" --ids -f "$TMP/t.txt")
[ -n "$ids" ] && [ "$ids" = "$ids2" ]; check "tokenize -f: the same ids from both files" $? "'$ids' vs '$ids2'"
"$BIN" tokenize -m "$M/stories260K.gguf" "Lily" | grep -q "Lily"; check "tokenize pieces" $?

# 5. info.
"$BIN" info "$M/stories260K.gguf" >"$TMP/info"
for want in "architecture:    llama" "parameters:" "F32" "per 1,000 tokens" "grouped-query"; do
  grep -q -- "$want" "$TMP/info"; check "info shows '$want'" $?
done

# 6. Errors: one line on stderr, nothing on stdout, exit 2 for usage and 1 for failures.
expect_error "no command" 2 "no command" --
expect_error "unknown command" 2 "unknown command" -- frobnicate
expect_error "unknown flag" 2 "unknown option '--frob'" -- run -m "$M/stories260K.gguf" --frob
expect_error "bench --embed malformed" 2 "--embed takes N:L" -- bench -m "$M/stories260K.gguf" --embed 64x128
expect_error "missing value" 2 "needs a value" -- run -m
expect_error "bad integer" 2 "expected an integer" -- run -m "$M/stories260K.gguf" -n abc
expect_error "negative n" 2 "out of range" -- run -m "$M/stories260K.gguf" -n -3
expect_error "bad temperature" 2 "expected a number" -- run -m "$M/stories260K.gguf" --temp hot
expect_error "top-p out of range" 2 "out of range" -- run -m "$M/stories260K.gguf" --top-p 1.5
expect_error "zero threads" 2 "out of range" -- run -m "$M/stories260K.gguf" -t 0
expect_error "no model" 2 "needs a model" -- run -p hi
expect_error "missing file" 1 "cannot open" -- run -m "$TMP/nope.gguf"
expect_error "directory as model" 1 "not a regular file" -- run -m "$TMP"
printf 'GGUF\x03\x00\x00\x00' >"$TMP/trunc.gguf"
expect_error "truncated gguf" 1 "truncated" -- run -m "$TMP/trunc.gguf"
head -c 100 "$M/stories260K.bin" >"$TMP/trunc.bin"
expect_error "truncated llama2c" 1 "truncated" -- run -m "$TMP/trunc.bin" -z "$M/tok512.bin"
expect_error "llama2c without tokenizer" 1 "pass its tokenizer" -- run -m "$M/stories260K.bin"
expect_error "tokenizer mismatch" 1 "do not belong together" -- run -m "$M/stories260K.bin" -z "$M/tokenizer.bin"
expect_error "tokenize mismatch" 1 "do not belong together" -- tokenize -m "$M/stories260K.bin" -z "$M/tokenizer.bin" hi
expect_error "vocab-only gguf is no model" 1 "" -- run -m "$M/ggml-vocab-llama-spm.gguf"
expect_error "unknown isa" 2 "unknown ISA" -- run -m "$M/stories260K.gguf" --isa sve
if [ "$(uname -m)" = x86_64 ]; then
  expect_error "the other architecture's isa" 1 "cannot run neon kernels" -- run -m "$M/stories260K.gguf" --isa neon
fi
expect_error "tokenize without text" 2 "TEXT" -- tokenize -m "$M/stories260K.gguf"
expect_error "synth bad shape" 2 "unknown shape" -- synth --shape nope -o "$TMP/x.gguf"
expect_error "synth dense type on a dense shape" 2 "no experts" -- synth --shape tiny --dense-type q8_0 -o "$TMP/x.gguf"
expect_error "synth bad dense type" 2 "unknown or unsupported dense type" -- synth --shape tiny-moe --dense-type q9 -o "$TMP/x.gguf"

# 7. KV cache switches.
out=$("$BIN" run -m "$M/stories260K.bin" -z "$M/tok512.bin" --temp 0 -n 256 --cache-type-k bf16 --cache-type-v int8 --kv-block-size 7 2>"$TMP/kvlog")
[ "$out" = "$(cat "$M/stories260K.expected_t0.txt")" ]; check "golden with bf16/int8 KV and 7-token blocks" $?
grep -q "memory: weights" "$TMP/kvlog"; check "memory report" $?
"$BIN" run -m "$M/stories260K.gguf" -n 8 --kv-layer-types '*=int4,first=int8,last=int8' --no-prefix-cache --sliding-window 4 --kv-memory 1M >/dev/null 2>&1; check "KV switches accepted" $?
expect_error "bad cache type" 2 "unknown KV cache type" -- run -m "$M/stories260K.gguf" --cache-type-k int3
expect_error "bad kv memory" 2 "invalid size" -- run -m "$M/stories260K.gguf" --kv-memory lots
expect_error "tiny kv memory" 1 "no usable block" -- run -m "$M/stories260K.gguf" --kv-memory 100
expect_error "bad layer spec" 1 "kv-layer-types" -- run -m "$M/stories260K.gguf" --kv-layer-types '99=int8'
expect_error "zero block size" 2 "out of range" -- run -m "$M/stories260K.gguf" --kv-block-size 0

# 8. bench: one JSON object with the required keys.
json=$("$BIN" bench -m "$M/stories260K.gguf" -p 16 -n 8 -r 1 -b 2 --json 2>/dev/null)
for key in prefill_tokens_per_s decode_tokens_per_s batch threads bandwidth_utilization \
  bandwidth_utilization_paired compute_utilization_paired; do
  case "$json" in *"\"$key\": "*) ok "bench --json has $key" ;; *) fail "bench --json has $key" "$json" ;; esac
done
if measured; then  # (each bench run probes the machine: 512 MiB read passes, slow under a sanitizer)
  "$BIN" bench -m "$M/stories260K.gguf" -p 16 -n 8 -r 1 --profile 2>/dev/null | grep -q "attention"; check "bench --profile" $?
fi
expect_error "bench without model" 2 "needs a model" -- bench -p 4
# bench -d: decode (single and batched) after a context of that many tokens.
if measured; then
"$BIN" bench -m "$M/stories260K.gguf" -p 8 -n 4 -d 100 -b 2 -r 1 --json 2>/dev/null | grep -q '"depth": 100'; check "bench -d --json" $?
"$BIN" bench -m "$M/stories260K.gguf" -p 8 -n 4 -d 100 -b 2 -r 1 2>/dev/null | grep -q "decode 4 x 2 sequences @ 100"; check "bench -d table" $?
"$BIN" bench -m "$M/stories260K.gguf" --embed 8:16 -r 1 2>/dev/null | grep -q "embed 8 passages of 16 tokens: .* passages/s, .* tokens/s"; check "bench --embed" $?
fi
expect_error "bench zero depth" 2 "out of range" -- bench -m "$M/stories260K.gguf" -d 0
# bench --sweep-batch: a table with the knee, an SVG chart, the knee remembered for serve.
if measured; then
PADDOCK_CACHE_DIR="$TMP/cache" "$BIN" bench -m "$M/stories260K.gguf" --sweep-batch 1,2,4 -n 8 -r 1 --chart "$TMP/sweep.svg" >"$TMP/sweep" 2>/dev/null &&
  grep -q "(knee)" "$TMP/sweep" && grep -q "<svg" "$TMP/sweep.svg" && grep -q "stories260K:" "$TMP/cache/knee.tsv" ; check "bench --sweep-batch" $? "$(cat "$TMP/sweep")"
PADDOCK_CACHE_DIR="$TMP/cache" "$BIN" bench -m "$M/stories260K.gguf" --sweep-batch 1,2 -n 4 -r 1 --json 2>/dev/null | grep -q '"knee": '; check "bench --sweep-batch --json" $?
fi
expect_error "sweep with zero" 2 "not a batch size" -- bench -m "$M/stories260K.gguf" --sweep-batch 0,4
expect_error "sweep absurd" 2 "not a batch size" -- bench -m "$M/stories260K.gguf" --sweep-batch 1,100000
expect_error "sweep descending" 2 "ascending" -- bench -m "$M/stories260K.gguf" --sweep-batch 8,2
expect_error "sweep not a number" 2 "not a batch size" -- bench -m "$M/stories260K.gguf" --sweep-batch 1,two
expect_error "chart without sweep" 2 "goes with --sweep-batch" -- bench -m "$M/stories260K.gguf" --chart "$TMP/x.svg"
expect_error "chart unwritable" 2 "cannot write" -- bench -m "$M/stories260K.gguf" --sweep-batch 1,2 --chart /nonexistent/dir/x.svg
# --trace: a Chrome trace with every operator per thread and the forward steps; bad paths refused first.
"$BIN" run -m "$M/stories260K.gguf" -p "Once upon a time" -n 8 -t 2 --trace "$TMP/run.json" >/dev/null 2>&1 &&
  python3 - "$TMP/run.json" <<'PY'; check "run --trace" $?
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
ops = {e["name"] for e in ev if e.get("cat") == "op"}
threads = {e["tid"] for e in ev if e.get("cat") == "op"}
fwd = [e for e in ev if e.get("name") == "forward"]
assert {"attention", "matmul q/k/v", "rmsnorm"} <= ops, ops
assert len(threads) == 2 and len(fwd) == 8, (threads, len(fwd))
PY
if measured; then
  "$BIN" bench -m "$M/stories260K.gguf" -p 8 -n 4 -r 1 --trace "$TMP/bench.json" >/dev/null 2>&1 && python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$TMP/bench.json"; check "bench --trace" $?
fi
expect_error "trace unwritable" 2 "cannot write" -- run -m "$M/stories260K.gguf" -n 2 --trace /nonexistent/dir/t.json
expect_error "bench trace unwritable" 2 "cannot write" -- bench -m "$M/stories260K.gguf" --trace /nonexistent/dir/t.json
expect_error "serve trace unwritable" 2 "cannot write" -- serve -m "$M/stories260K.gguf" --trace /nonexistent/dir/t.json
# ablate: the switch table (Markdown on stdout, .md/.json/.svg written); bad input before work.
if measured; then
"$BIN" ablate -m "$M/stories260K.gguf" -p 32 -n 16 -r 1 --switches fuse-attn,fuse-ffn -o "$TMP/abl" >"$TMP/abl.out" 2>/dev/null &&
  grep -q "| all on |" "$TMP/abl.out" && grep -q "product of the single factors" "$TMP/abl.out" &&
  grep -q '"product_of_singles"' "$TMP/abl.json" && grep -q "<svg" "$TMP/abl.svg" && cmp -s "$TMP/abl.out" "$TMP/abl.md" ; check "ablate" $? "$(cat "$TMP/abl.out")"
"$BIN" ablate -m "$M/stories260K.gguf" --workload serve -p 24 -n 8 --requests 4 --concurrency 2 -r 1 --switches prefix-cache -o "$TMP/ablserve" >/dev/null 2>&1 &&
  grep -q '"workload": "serve"' "$TMP/ablserve.json"; check "ablate --workload serve" $?
fi
expect_error "ablate unknown switch" 2 "unknown switch 'fusion'" -- ablate -m "$M/stories260K.gguf" --switches fusion
expect_error "ablate unwritable output" 2 "cannot write" -- ablate -m "$M/stories260K.gguf" -o /nonexistent/dir/x
expect_error "ablate bad workload" 2 "single or serve" -- ablate -m "$M/stories260K.gguf" --workload batch
expect_error "ablate without model" 2 "needs a model" -- ablate
expect_error "ablate missing model" 1 "" -- ablate -m "$TMP/none.gguf"

# 9. synth writes a model that runs.
"$BIN" synth --shape tiny --type q8_0 -o "$TMP/tiny.gguf" 2>/dev/null; check "synth writes a model" $?
"$BIN" run -m "$TMP/tiny.gguf" -n 5 --ignore-eos >/dev/null 2>&1; check "the synthetic model runs" $?

# 10. chat: scripted turns through the model's chat template; /reset; bad template names.
out=$(printf 'Tell me a story.\n/reset\nHi\n/exit\nnever read\n' | "$BIN" chat -m "$M/stories260K.gguf" --temp 0 -n 12 2>/dev/null)
[ "$(printf '%s\n' "$out" | wc -l)" -eq 2 ]; check "chat: two replies" $? "got: $out"
expect_error "chat unknown template" 1 "unknown chat template" -- chat -m "$M/stories260K.gguf" --chat-template nope
expect_error "chat both templates" 2 "not both" -- chat -m "$M/stories260K.gguf" --chat-template chatml --chat-template-file x
printf 'Hi\n' | "$BIN" chat -m "$M/stories260K.gguf" --chat-template-file "$HERE/chat_templates/chatml.jinja" --temp 0 -n 4 >/dev/null 2>&1; check "chat with a template file" $?
# 11. tokenize --bench prints one JSON object.
"$BIN" tokenize -m "$M/ggml-vocab-gpt-2.gguf" -f "$M/ggml-vocab-gpt-2.gguf.inp" --bench 2>/dev/null | grep -q '"mb_per_s"'; check "tokenize --bench" $?

# 12. perplexity / compare: one JSON object with the required keys; usage errors.
"$BIN" perplexity -m "$M/stories260K.gguf" -f "$M/stories260K.expected_t0.txt" --ctx 64 --json 2>/dev/null | grep -q '"ppl_se"'; check "perplexity --json" $?
# A forward-pass switch reaches the scores (float activations on a quantized file).
"$BIN" quantize "$M/stories260K.gguf" "$TMP/ppl-q8.gguf" --type q8_0 2>/dev/null
p_int8=$("$BIN" perplexity -m "$TMP/ppl-q8.gguf" -f "$M/stories260K.expected_t0.txt" --ctx 64 --json 2>/dev/null | json_get 'd["ppl"]')
p_float=$("$BIN" perplexity -m "$TMP/ppl-q8.gguf" -f "$M/stories260K.expected_t0.txt" --ctx 64 --json --no-int8-act 2>/dev/null | json_get 'd["ppl"]')
[ -n "$p_int8" ] && [ -n "$p_float" ] && [ "$p_int8" != "$p_float" ]
check "perplexity --no-int8-act: another score" $? "$p_int8 / $p_float"
json=$("$BIN" compare -m "$M/stories260K.gguf" -m "$M/stories260K.gguf" -f "$M/stories260K.expected_t0.txt" --ctx 64 --json 2>/dev/null)
for key in kl top1_agreement ppl_a ppl_b; do
  case "$json" in *"\"$key\": "*) ok "compare --json has $key" ;; *) fail "compare --json has $key" "$json" ;; esac
done
expect_error "compare with one model" 2 "two models" -- compare -m "$M/stories260K.gguf" -f "$M/stories260K.expected_t0.txt"
printf "Once upon a time" >"$TMP/short.txt"
expect_error "perplexity on a too-short text" 1 "too short" -- perplexity -m "$M/stories260K.gguf" -f "$TMP/short.txt" --ctx 64

# 13. quantize: a Q8_0 copy runs and stays close to the original; a Q4_0 copy drifts further.
"$BIN" quantize "$M/stories260K.gguf" "$TMP/q8.gguf" --type q8_0 2>/dev/null; check "quantize q8_0" $?
"$BIN" quantize "$M/stories260K.gguf" "$TMP/q4.gguf" --type q4_0 --keep 'output.weight' 2>/dev/null; check "quantize q4_0" $?
"$BIN" info "$TMP/q4.gguf" 2>/dev/null | grep -q "Q4_0"; check "the quantized file has Q4_0 tensors" $?
kl8=$("$BIN" compare -m "$M/stories260K.gguf" -m "$TMP/q8.gguf" -f "$M/stories260K.expected_t0.txt" --ctx 64 --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['kl'] < 0.01 and d['top1_agreement'] > 0.9)")
[ "$kl8" = True ]; check "the q8_0 copy is close to the original" $?
kl4=$("$BIN" compare -m "$M/stories260K.gguf" -m "$TMP/q4.gguf" -f "$M/stories260K.expected_t0.txt" --ctx 64 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['kl'])")
python3 -c "import sys; sys.exit(0 if float('$kl4') > 0 else 1)"; check "the q4_0 copy differs from the original" $?
# Mixed precision: measured sensitivities choose which matrices stay Q8_0 within the budget,
# and the result is closer to the original than uniform Q4_0.
"$BIN" quantize "$M/stories260K.gguf" "$TMP/mixed.gguf" --type q4_0 --target-bpw 7.5 --calib "$M/stories260K.expected_t0.txt" --calib-ctx 64 2>"$TMP/mixed.log"; check "quantize --target-bpw" $?
bpw=$(sed -n 's/.*, \([0-9.]*\) bits per weight/\1/p' "$TMP/mixed.log")
python3 -c "import sys; sys.exit(0 if 7.0 < float('$bpw') <= 7.5 else 1)"; check "mixed precision within its budget" $? "$bpw bits per weight"
grep -q "^keeping .* in Q8_0" "$TMP/mixed.log"; check "mixed precision keeps some matrices wide" $?
"$BIN" quantize "$M/stories260K.gguf" "$TMP/q4all.gguf" --type q4_0 2>/dev/null
klm=$("$BIN" compare -m "$M/stories260K.gguf" -m "$TMP/mixed.gguf" -f "$M/stories260K.expected_t0.txt" --ctx 64 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['kl'])")
klu=$("$BIN" compare -m "$M/stories260K.gguf" -m "$TMP/q4all.gguf" -f "$M/stories260K.expected_t0.txt" --ctx 64 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['kl'])")
python3 -c "import sys; sys.exit(0 if float('$klm') < float('$klu') else 1)"; check "mixed precision beats uniform q4_0" $? "KL $klm vs $klu"
# Mixtures of experts: 3-D expert tensors are quantized (the router stays F32), info shows the
# active parameters, and the quantized model runs, its expert matrices interleaved at load.
"$BIN" synth --shape tiny-moe --type f32 -o "$TMP/moe.gguf" 2>/dev/null; check "synth tiny-moe" $?
"$BIN" quantize "$TMP/moe.gguf" "$TMP/moe-q4.gguf" --type q4_0 2>"$TMP/moe-q.log"; check "quantize a MoE" $?
grep -q "ffn_gate_exps.weight *F32 *-> Q4_0" "$TMP/moe-q.log" ; check "expert tensors quantized" $? "$(grep exps "$TMP/moe-q.log" | head -1)"
grep -q "ffn_gate_inp.weight *F32 *-> F32" "$TMP/moe-q.log"; check "the router kept F32" $?
"$BIN" info "$TMP/moe-q4.gguf" 2>/dev/null | grep -q "^active: .* per token: 2 of 8 experts of FFN 64"; check "info shows the active parameters" $?
"$BIN" run -m "$TMP/moe-q4.gguf" -p "Once upon a time" -n 8 --ignore-eos >/dev/null 2>&1; check "the quantized MoE runs" $?
"$BIN" quantize "$TMP/moe.gguf" "$TMP/moe-pq4.gguf" --type pq4_g32 2>/dev/null; check "quantize a MoE to pq4_g32" $?
"$BIN" run -m "$TMP/moe-pq4.gguf" -p "Once upon a time" -n 8 --ignore-eos >/dev/null 2>&1; check "the pq4_g32 MoE runs" $?
# Hybrid recurrent models: quantized with their convolution taps kept F32 (llama.cpp reads them
# so), info shows the layer kinds and the state per sequence, and the quantized models run.
for shape in tiny-qwen35 tiny-lfm2; do
  "$BIN" synth --shape $shape --type f32 -o "$TMP/$shape.gguf" 2>/dev/null; check "synth $shape" $?
  "$BIN" quantize "$TMP/$shape.gguf" "$TMP/$shape-q4.gguf" --type q4_0 2>"$TMP/$shape-q.log"; check "quantize $shape" $?
  grep -Eq "(ssm_conv1d|shortconv.conv).weight *F32 *-> F32" "$TMP/$shape-q.log"; check "$shape's convolution taps kept F32" $?
  "$BIN" info "$TMP/$shape-q4.gguf" 2>/dev/null | grep -Eq "^layers: +(Gated DeltaNet|short convolution) x[0-9]+, attention x2"; check "info shows $shape's layer kinds" $?
  "$BIN" info "$TMP/$shape-q4.gguf" 2>/dev/null | grep -q "^recurrent state: "; check "info shows $shape's state" $?
  "$BIN" run -m "$TMP/$shape-q4.gguf" -p "Once upon a time" -n 8 --ignore-eos >/dev/null 2>&1; check "the quantized $shape runs" $?
done
# Multi-token prediction (--spec mtp): tiny-qwen35-mtp's prediction block drafts what llama.cpp's
# draft-mtp drafts (built here at d32676d: its verbose log's top candidates, scripts/peer-mtp),
# the text is plain decoding's, a quantized copy keeps the block, info counts it, and a model
# without one is refused by name.
"$BIN" synth --shape tiny-qwen35-mtp --type f32 -o "$TMP/mtp.gguf" 2>/dev/null; check "synth tiny-qwen35-mtp" $?
PADDOCK_LOG_DRAFTS=1 "$BIN" run -m "$TMP/mtp.gguf" -p "Once upon a time" -n 8 --temp 0 --spec mtp --spec-fixed --spec-max 3 2>"$TMP/mtp.err" >"$TMP/mtp.out"
expect_eq "--spec mtp drafts what llama.cpp's draft-mtp drafts" "$(grep -m4 "drafts after" "$TMP/mtp.err" | sed 's/^paddock: //' | tr '\n' ';')" \
  "drafts after 27 tokens: 96 179 187;drafts after 28 tokens: 46 1 318;drafts after 29 tokens: 258 167 218;drafts after 30 tokens: 297 3 96;"
"$BIN" run -m "$TMP/mtp.gguf" -p "Once upon a time" -n 8 --temp 0 2>/dev/null >"$TMP/plain.out"
expect_eq "--spec mtp: plain decoding's text" "$(cat "$TMP/mtp.out")" "$(cat "$TMP/plain.out")"
"$BIN" info "$TMP/mtp.gguf" 2>/dev/null | grep -q "^prediction: *1 multi-token-prediction layer"; check "info shows the prediction layer" $?
"$BIN" quantize "$TMP/mtp.gguf" "$TMP/mtp-q8.gguf" --type q8_0 2>/dev/null; check "quantize tiny-qwen35-mtp" $?
"$BIN" run -m "$TMP/mtp-q8.gguf" -p "Once upon a time" -n 16 --temp 0 --spec mtp --spec-fixed 2>"$TMP/mtp-q8.err" >/dev/null
grep -q "speculation (mtp): [1-9][0-9]* drafted" "$TMP/mtp-q8.err"; check "the quantized copy drafts with its block" $? "$(tail -2 "$TMP/mtp-q8.err")"
expect_error "--spec mtp without prediction layers" 1 "has no multi-token-prediction layers" -- run -m "$TMP/tiny-qwen35.gguf" -p hi -n 2 --spec mtp
# Gemma 4's windowed layers as rings: info counts them (steps of 256 and a window of 8 need a
# ring of 304 positions, so a context of 1,024 keeps rings), and the text is the same with them
# in blocks (--no-kv-ring).
"$BIN" synth --shape tiny-gemma4 --type f32 --ctx 1024 -o "$TMP/g4.gguf" 2>/dev/null; check "synth tiny-gemma4" $?
"$BIN" info "$TMP/g4.gguf" 2>/dev/null | grep -q "^windowed layers: .* a ring of 304 positions"; check "info shows the windowed layers' rings" $?
"$BIN" run -m "$TMP/g4.gguf" -p "Once upon a time" -n 400 --ignore-eos --temp 0 2>/dev/null >"$TMP/g4-ring.out"
"$BIN" run -m "$TMP/g4.gguf" -p "Once upon a time" -n 400 --ignore-eos --temp 0 --no-kv-ring 2>/dev/null >"$TMP/g4-blocks.out"
expect_eq "rings past the window: the text of blocks (--no-kv-ring)" "$(md5sum <"$TMP/g4-ring.out")" "$(md5sum <"$TMP/g4-blocks.out")"
# 14. Paddock types (stored interleaved): int8 per channel close to the original; calibrated
# int4 (activation statistics + AWQ scaling) closer than round-to-nearest at the same size; a
# file with Paddock types of another layout version is refused.
kl_of() { "$BIN" compare -m "$M/stories260K.gguf" -m "$1" -f "$M/stories260K.expected_t0.txt" --ctx 64 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['kl'])"; }
# The lookup types: quantize writes them (IQ4_XS falls back to IQ4_NL for stories260K's rows of
# 64 and 172) and the copies run close to the original.
for t in iq4_xs mxfp4; do
  "$BIN" quantize "$M/stories260K.gguf" "$TMP/$t.gguf" --type $t 2>/dev/null; check "quantize $t" $?
  "$BIN" info "$TMP/$t.gguf" 2>/dev/null | grep -q "$([ $t = mxfp4 ] && echo MXFP4 || echo IQ4_NL)"; check "the $t file has its type" $?
  python3 -c "import sys; sys.exit(0 if float('$(kl_of "$TMP/$t.gguf" 2>/dev/null || echo 9)') < 0.2 else 1)" 2>/dev/null; check "the $t copy is close to the original" $?
done
"$BIN" quantize "$M/stories260K.gguf" "$TMP/pq8.gguf" --type pq8_c 2>/dev/null; check "quantize pq8_c" $?
"$BIN" info "$TMP/pq8.gguf" 2>/dev/null | grep -q "PQ8_C"; check "the file has PQ8_C tensors" $?
python3 -c "import sys; sys.exit(0 if float('$(kl_of "$TMP/pq8.gguf")') < 0.01 else 1)"; check "the pq8_c copy is close to the original" $?
"$BIN" run -m "$TMP/pq8.gguf" -p "Once upon a time" -n 8 >/dev/null 2>&1; check "the pq8_c model runs" $?
for t in pq4_g64 pq4_g32z; do
  "$BIN" quantize "$M/stories260K.gguf" "$TMP/$t-rtn.gguf" --type $t --calib "$M/stories260K.expected_t0.txt" --calib-ctx 64 --rtn 2>/dev/null; check "quantize $t --rtn" $?
  "$BIN" quantize "$M/stories260K.gguf" "$TMP/$t-cal.gguf" --type $t --calib "$M/stories260K.expected_t0.txt" --calib-ctx 64 2>"$TMP/$t.log"; check "quantize $t --calib" $?
  grep -q "(activation-aware)" "$TMP/$t.log"; check "$t: activation-aware tensors" $?
  [ "$(stat -c %s "$TMP/$t-rtn.gguf")" = "$(stat -c %s "$TMP/$t-cal.gguf")" ]; check "$t: calibrated and RTN files of one size" $?
  rtn=$(kl_of "$TMP/$t-rtn.gguf"); cal=$(kl_of "$TMP/$t-cal.gguf")
  python3 -c "import sys; sys.exit(0 if float('$cal') < float('$rtn') else 1)"; check "$t: calibrated KL below RTN" $? "$cal vs $rtn"
done
# 2:4 sparsity: the chosen tensors become PS8_C (5.5 bits), the model runs, and the pruning
# (activation-weighted with --calib) is closer to the original than magnitude pruning alone.
"$BIN" quantize "$M/stories260K.gguf" "$TMP/sp.gguf" --type pq8_c --sparsity 2:4 --sparse-tensors '*attn_v*' 2>"$TMP/sp.log"; check "quantize --sparsity" $?
grep -q "attn_v.weight .*-> PS8_C" "$TMP/sp.log"; check "PS8_C tensors" $?
"$BIN" run -m "$TMP/sp.gguf" -p "Once upon a time" -n 8 >/dev/null 2>&1; check "the sparse model runs" $?
expect_error "bad sparsity" 2 "supports 2:4" -- quantize "$M/stories260K.gguf" "$TMP/x.gguf" --type q8_0 --sparsity 1:4
python3 - "$TMP/pq8.gguf" "$TMP/pq8-v9.gguf" <<'PY'
import sys
d = open(sys.argv[1], 'rb').read()
key = b'paddock.quantization_version'
i = d.index(key) + len(key) + 4  # the u32 value after the key and its type
open(sys.argv[2], 'wb').write(d[:i] + (9).to_bytes(4, 'little') + d[i + 4:])
PY
expect_error "paddock types of another version" 1 "layout version 9" -- run -m "$TMP/pq8-v9.gguf" -p "x" -n 1
expect_error "target-bpw without calibration" 2 "calibration text" -- quantize "$M/stories260K.gguf" "$TMP/x.gguf" --type q4_0 --target-bpw 6
expect_error "quantize unknown type" 2 "unknown or unsupported type" -- quantize "$M/stories260K.gguf" "$TMP/x.gguf" --type q3_z
expect_error "quantize onto itself" 2 "different file" -- quantize "$TMP/q8.gguf" "$TMP/q8.gguf" --type q4_0
expect_error "quantize a non-GGUF" 1 "" -- quantize "$M/tok512.bin" "$TMP/x.gguf" --type q8_0

# 13. Speculative decoding: greedy output unchanged (the golden file), acceptance printed; bad
# configurations are one clear line.
"$BIN" run -m "$M/stories260K.bin" -z "$M/tok512.bin" --temp 0 -n 256 --spec ngram >"$TMP/spec" 2>"$TMP/log"
if cmp -s "$TMP/spec" "$M/stories260K.expected_t0.txt"; then ok "--spec ngram: the golden greedy output"; else fail "--spec ngram: the golden greedy output" "differs"; fi
grep -q "speculation (ngram): [0-9]* drafted, [0-9]* accepted" "$TMP/log"; check "--spec: an acceptance line" $?
expect_error "spec-max 0" 2 "out of range" -- run -m "$M/stories260K.gguf" --spec ngram --spec-max 0
expect_error "spec-max 1000" 2 "out of range" -- run -m "$M/stories260K.gguf" --spec ngram --spec-max 1000
expect_error "unknown spec" 2 "unknown --spec" -- run -m "$M/stories260K.gguf" --spec lookahead
expect_error "draft without model" 2 "needs --draft-model" -- run -m "$M/stories260K.gguf" --spec draft
"$BIN" synth --shape tiny --type q4_0 -o "$TMP/tiny-draft.gguf" 2>/dev/null
expect_error "draft of another vocabulary" 1 "vocabulary" -- run -m "$M/stories260K.gguf" --spec draft --draft-model "$TMP/tiny-draft.gguf"

# 13b. LoRA adapters (llama.cpp's GGUF adapter layout): --lora FILE:0 is the base model; an
# adapter changes the greedy text; one for another model is one error naming the tensor.
"$BIN" synth --lora-for "$M/stories260K.gguf" --rank 8 -o "$TMP/lora.gguf" 2>/dev/null
"$BIN" run -m "$M/stories260K.gguf" --temp 0 -n 64 >"$TMP/base.txt" 2>/dev/null
"$BIN" run -m "$M/stories260K.gguf" --temp 0 -n 64 --lora "$TMP/lora.gguf:0" >"$TMP/lora0.txt" 2>/dev/null
"$BIN" run -m "$M/stories260K.gguf" --temp 0 -n 64 --lora "$TMP/lora.gguf" >"$TMP/lora1.txt" 2>/dev/null
cmp -s "$TMP/base.txt" "$TMP/lora0.txt" && [ -s "$TMP/lora1.txt" ] && ! cmp -s "$TMP/base.txt" "$TMP/lora1.txt" \
 ; check "--lora: scale 0 is the base model, scale 1 changes the text" $?
"$BIN" synth --shape tiny --type f32 -o "$TMP/tiny-f32.gguf" 2>/dev/null
"$BIN" synth --lora-for "$TMP/tiny-f32.gguf" -o "$TMP/lora-tiny.gguf" 2>/dev/null
expect_error "adapter for another model" 1 "'blk.0.ffn_gate.weight' does not fit its base matrix" -- run -m "$M/stories260K.gguf" -p x -n 1 --lora "$TMP/lora-tiny.gguf"
expect_error "a model as an adapter" 1 "not a LoRA adapter" -- run -m "$M/stories260K.gguf" -p x -n 1 --lora "$M/stories260K.gguf"
expect_error "lora-for with a shape" 2 "does not apply to --lora-for" -- synth --lora-for "$M/stories260K.gguf" --type q4_0 -o "$TMP/x.gguf"

# 14. --mlock: the weights locked in memory (CI runs as root; elsewhere `ulimit -l` may refuse).
if "$BIN" run -m "$M/stories260K.gguf" -n 5 --temp 0 --mlock >"$TMP/out" 2>"$TMP/err"; then ok "--mlock"; else
  if [ "$(id -u)" -eq 0 ]; then fail "--mlock" "$(cat "$TMP/err")"; else grep -q "ulimit -l" "$TMP/err"; check "--mlock: an error naming ulimit -l" $? "$(cat "$TMP/err")"; fi
fi

# 15. Constrained decoding on the command line: the output parses as the schema says; a bad
# schema or grammar is a usage error naming it, before the model loads.
G="$HERE/grammar"
"$BIN" run -m "$M/stories260K.gguf" -p "Once upon a time" --json-schema "$G/enums.json" --temp 1 \
  --seed 5 -n 200 >"$TMP/json" 2>"$TMP/log"
python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read()[len('Once upon a time'):]); assert d['color'] in ('red','green','blue') and d['version']==2" "$TMP/json" \
  ; check "--json-schema output parses as the schema says" $? "$(cat "$TMP/json")"
grep -q "finish: eos" "$TMP/log"; check "--json-schema: grammar completion does not end the output" $?
"$BIN" run -m "$M/stories260K.gguf" -p "x" --grammar-file "$G/list.gbnf" --temp 1 -n 120 2>/dev/null | tail -c +2 \
  | grep -qE '^- [a-z][a-z ]* \([1-9][0-9]?\)$'; check "--grammar-file output" $?
echo '{"type": "object", "not": {"required": ["a"]}}' >"$TMP/bad.json"
expect_error "unsupported schema keyword" 2 "keyword 'not' is not supported" -- run -m /nonexistent --json-schema "$TMP/bad.json"
printf 'root ::= item\n' >"$TMP/bad.gbnf"
expect_error "undefined grammar rule" 2 "undefined rule 'item'" -- run -m /nonexistent --grammar-file "$TMP/bad.gbnf"
expect_error "missing schema file" 2 "--json-schema /nonexistent.json" -- run -m /nonexistent --json-schema /nonexistent.json
expect_error "two grammars" 2 "give one of" -- run -m /nonexistent --json --grammar-file "$TMP/bad.gbnf"
"$BIN" run --json-schema "$G/person.json" --show-grammar -m x 2>/dev/null | grep -q '^root ::= '; check "--show-grammar" $?

# paddock tune: measures, stores one entry, and run/bench read it; --no-tune and a corrupt,
# foreign or unwritable cache fall back to the defaults with one warning, never an error.
TC="$TMP/tune-cache"
tune_env() { PADDOCK_CACHE_DIR="$TC" "$@"; }
if measured; then
tune_env "$BIN" tune -m "$M/stories260K.gguf" -p 64 -r 1 >"$TMP/tune.out" 2>"$TMP/tune.err" \
  && grep -q '^chosen: .* prefetch \(off\|auto\|all\) (decode' "$TMP/tune.out" \
  && grep -q 'decode (64 tokens), prefetch: off=[0-9.]* auto=[0-9.]* all=[0-9.]*' "$TMP/tune.out" \
  && head -n 1 "$TC/tune.tsv" | grep -qx '# paddock tune cache v2' \
  && [ "$(grep -c $'\tthreads=.*\tprefetch=[a-z]*\tdecode=' "$TC/tune.tsv")" = 1 ] ; check "tune stores one entry" $? "$(cat "$TMP/tune.err")"
tune_env "$BIN" tune -m "$M/stories260K.gguf" -p 64 -r 1 >/dev/null 2>&1
[ "$(grep -c $'\tthreads=' "$TC/tune.tsv")" = 1 ]; check "tune again replaces its entry" $?
tune_env "$BIN" run -m "$M/stories260K.gguf" -p "Once upon a time" --temp 0 -n 20 >"$TMP/tuned" 2>"$TMP/tuned.err"
grep -q "tuned for this machine" "$TMP/tuned.err"; check "run reads the tune cache" $?
tune_env "$BIN" run -m "$M/stories260K.gguf" -p "Once upon a time" --temp 0 -n 20 --no-tune >"$TMP/untuned" 2>"$TMP/untuned.err"
! grep -q "tuned" "$TMP/untuned.err" && cmp -s "$TMP/tuned" "$TMP/untuned"; check "--no-tune: defaults, same output" $?
tune_env "$BIN" bench -m "$M/stories260K.gguf" -p 64 -n 4 -r 1 --json 2>/dev/null \
  | python3 -c "import json,sys; t=json.load(sys.stdin)['tune']; assert t['default_prefill_tokens_per_s'] > 0 and t['tuned_prefill_tokens_per_s'] > 0 and t['default_decode_tokens_per_s'] > 0 and t['tuned_decode_tokens_per_s'] > 0 and t['prefetch'] in ('off', 'auto', 'all')" \
 ; check "bench reports tuned vs default" $?
cp "$TC/tune.tsv" "$TMP/good.tsv"
printf 'garbage\tline\n' >>"$TC/tune.tsv"
tune_env "$BIN" run -m "$M/stories260K.gguf" -p "Once upon a time" --temp 0 -n 20 >"$TMP/out2" 2>"$TMP/err2"
[ "$(grep -c 'warning: .*malformed' "$TMP/err2")" = 1 ] && grep -q "tuned for" "$TMP/err2" && cmp -s "$TMP/out2" "$TMP/untuned" \
  ; check "a malformed line: one warning, the good entry still used" $? "$(cat "$TMP/err2")"
head -c 3000 /dev/urandom >"$TC/tune.tsv"
tune_env "$BIN" run -m "$M/stories260K.gguf" -p "Once upon a time" --temp 0 -n 20 >"$TMP/out3" 2>"$TMP/err3"
[ "$(grep -c 'not a paddock tune cache' "$TMP/err3")" = 1 ] && cmp -s "$TMP/out3" "$TMP/untuned" \
  ; check "a foreign file: one warning, defaults" $? "$(cat "$TMP/err3")"
sed 's/^paddock-[^\t]*/paddock-0.0.0-old/' "$TMP/good.tsv" >"$TC/tune.tsv"
tune_env "$BIN" run -m "$M/stories260K.gguf" -p "Once upon a time" --temp 0 -n 20 >"$TMP/out4" 2>"$TMP/err4"
grep -q "measured by another build" "$TMP/err4" && ! grep -q "tuned for" "$TMP/err4"; check "a stale entry: defaults" $?
sed '1s/v2$/v1/' "$TMP/good.tsv" >"$TC/tune.tsv"  # an older build's format
tune_env "$BIN" run -m "$M/stories260K.gguf" -p "Once upon a time" --temp 0 -n 20 >"$TMP/out6" 2>"$TMP/err6"
[ "$(grep -c 'written by an older build' "$TMP/err6")" = 1 ] && ! grep -q "tuned for\|warning" "$TMP/err6" \
  && cmp -s "$TMP/out6" "$TMP/untuned" ; check "a v1 cache: one note, defaults" $? "$(cat "$TMP/err6")"
fi
# The prefetch choice changes speed, never the output (the Q4_0 copy: its re-laid matrices
# prefetch under all, not under auto); a name it does not know is an error.
for pf in auto off all; do
  "$BIN" run -m "$TMP/q4.gguf" -p "Once upon a time" --temp 0 -n 20 --no-tune --prefetch $pf >"$TMP/pf-$pf" 2>/dev/null
  [ -s "$TMP/pf-$pf" ] && cmp -s "$TMP/pf-$pf" "$TMP/pf-auto"; check "--prefetch $pf: the same output" $?
done
expect_error "unknown prefetch" 2 "'some' is not one of auto, all, off" -- run -m /nonexistent --prefetch some
expect_error "two prefetch flags" 2 "give one" -- run -m /nonexistent --prefetch all --no-prefetch
expect_error "serve: unknown prefetch" 2 "'none' is not one of auto, all, off" -- serve -m /nonexistent --prefetch none
# Sizes and durations say what they take (issue: faults answered honestly, the smaller items).
expect_error "a size under a byte" 2 "less than a byte" -- run -m "$M/stories260K.gguf" --kv-disk "$TMP/kvb" --kv-disk-budget 0.5
expect_error "a KV disk budget under 1M" 2 "at least 1M" -- run -m "$M/stories260K.gguf" --kv-disk "$TMP/kvb" --kv-disk-budget 4K
"$BIN" run -m "$M/stories260K.gguf" -p "Once" -n 2 --kv-disk "$TMP/kvb" --kv-disk-budget 1T >/dev/null 2>"$TMP/err1t"
check "--kv-disk-budget 1T: accepted (T is a unit), a warning when over the free space" $? "$(cat "$TMP/err1t")"
expect_error "responses max age: its own name and examples" 2 "--responses-max-age 'soon' is not a duration (seconds, or e.g. 30d" -- serve -m /nonexistent --responses-max-age soon
expect_error "responses max age: never negative" 2 "must not be negative" -- serve -m /nonexistent --responses-max-age -1
expect_error "responses if damaged: the choices" 2 "not one of move, refuse" -- serve -m /nonexistent --responses-if-damaged keep
if measured; then
touch "$TMP/plainfile"  # a cache directory under a plain file cannot be made, even by root
PADDOCK_CACHE_DIR="$TMP/plainfile/sub" "$BIN" tune -m "$M/stories260K.gguf" -p 64 -r 1 >/dev/null 2>"$TMP/err5"
rc=$?
[ $rc = 0 ] && [ "$(grep -c "cannot write the tune cache" "$TMP/err5")" = 1 ] ; check "an unwritable cache: one warning, exit 0" $? "rc $rc, $(cat "$TMP/err5")"
fi
expect_error "tune without a model" 2 "tune needs a model" -- tune
expect_error "tune prompt too long" 2 "exceeds the model's context" -- tune -m "$M/stories260K.gguf" -p 4000

finish cli
