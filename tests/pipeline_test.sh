#!/usr/bin/env bash
# A model split by layers across processes under Open MPI's mpirun (dist/pipeline.h):
#   - greedy text with 1, 2 and 3 stages equal to one process (stories260K, and a synthetic
#     TinyLlama shape with an explicit --layers split); seeded sampling, speculative decoding
#     and a grammar equal too;
#   - batch invariance: concurrent requests through a 2-stage server give each prompt's text
#     alone from a single-process server (micro-batches in flight through the stages);
#   - memory: each stage re-lays and holds only its layers (about 1/N of the weights); a model
#     over a per-process --memory-budget is refused by one process and served by two;
#   - faults: a stage killed with SIGKILL under load fails the requests in flight with an error
#     (none hangs), /health names the stage, new requests get a 503; the job restarted serves;
#   - bad input: another model file on a stage (one error naming what differs), --layers that
#     do not add up, pipeline flags without mpirun.
# usage: pipeline_test.sh PADDOCK_BIN
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
if ! command -v mpirun >/dev/null; then
  fail "mpirun" "not found (apt-get install openmpi-bin libopenmpi-dev)"
  exit 1
fi
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One host (`plm isolated`: no ssh needed), loopback TCP between the ranks (what a LAN link
# is), any number of ranks on 2 cores; for a server, the launcher leaves the head running when
# a stage dies (it reports the loss; mpirun then exits 0 whatever the ranks' codes, so commands
# whose exit code is checked run without it).
MPI=(mpirun --mca plm isolated --oversubscribe --bind-to none --mca btl self,tcp --mca btl_tcp_if_include lo)
MPI_SERVE=("${MPI[@]}" --enable-recovery)
S=$M/stories260K.gguf
TL=$TMP/tl4.gguf
"$BIN" synth --shape tinyllama --type q8_0 --layers 4 --seed 5 -o "$TL" >/dev/null 2>&1
P="Once upon a time"

run1() { "$BIN" run -m "$@" -t 1 2>/dev/null; }
# (A stage-timeout well above the default: these check results, not fault detection, and a
# loaded 2-core machine must not turn a slow heartbeat into a lost stage.)
runp() {  # runp NP MODEL ARGS...
  local np=$1
  shift
  timeout 120 "${MPI[@]}" -np "$np" "$BIN" run --stage-timeout 30 -m "$@" 2>"$TMP/runp.log"
}

# --- correctness: 1, 2 and 3 stages
ref=$(run1 "$S" -p "$P" -n 40 --temp 0)
[ -n "$ref" ] && [ "$(runp 1 "$S" -p "$P" -n 40 --temp 0)" = "$ref" ]
check "stories260K: mpirun -np 1 gives the single process's greedy text" $?
out=$(runp 2 "$S" -p "$P" -n 40 --temp 0)
# (the ranks' stderr lines reach the log through mpirun and may interleave, one rank's bytes
# inside another's line: the split is looked for in parts, and in a second run's log when the
# first's lines came apart; the text must be right each time)
split_seen() { grep -q "stage 1 (rank 1" "$TMP/runp.log" && grep -q "layers 3-4 and the output head" "$TMP/runp.log"; }
if [ "$out" = "$ref" ] && ! split_seen; then out=$(runp 2 "$S" -p "$P" -n 40 --temp 0); fi
[ "$out" = "$ref" ] && split_seen ||
  { echo "     got [$out]"; echo "     want [$ref]"; tail -n 5 "$TMP/runp.log" | sed 's/^/     /'; false; }
check "stories260K: 2 stages give the same greedy text (layers 0-2 | 3-4)" $?
[ "$(runp 3 "$S" -p "$P" -n 40 --temp 0)" = "$ref" ]
check "stories260K: 3 stages give the same greedy text" $?
ref=$(run1 "$S" -p "$P" -n 40 --temp 0.9 --seed 11)
[ "$(runp 2 "$S" -p "$P" -n 40 --temp 0.9 --seed 11)" = "$ref" ] &&
  [ "$(runp 3 "$S" -p "$P" -n 40 --temp 0.9 --seed 11)" = "$ref" ]
check "stories260K: seeded sampling gives the same text with 2 and 3 stages" $?
ref=$(run1 "$TL" -p "$P" -n 24 --temp 0)
[ -n "$ref" ] && [ "$(runp 2 "$TL" -p "$P" -n 24 --temp 0)" = "$ref" ]
check "TinyLlama shape (4 layers, Q8_0): 2 stages give the same greedy text" $?
[ "$(runp 3 "$TL" -p "$P" -n 24 --temp 0 --layers 1,1,2)" = "$ref" ] &&
  grep -q "stage 2 (rank 2 .*layers 2-3 and the output head" "$TMP/runp.log"
check "TinyLlama shape: 3 stages split --layers 1,1,2 give the same greedy text" $?

# speculative decoding (several logits rows per sequence through the stages) and a grammar
L="Once upon a time, there was a little girl named Lily. She loved to play outside"
ref=$(run1 "$S" -p "$L" -n 60 --temp 0)
[ "$(runp 2 "$S" -p "$L" -n 60 --temp 0 --spec ngram --spec-fixed --spec-max 4)" = "$ref" ] &&
  grep -q "speculation (ngram): [1-9][0-9]* drafted" "$TMP/runp.log"
check "2 stages with n-gram speculation (drafts verified through the stages): the same text" $?
ref=$(run1 "$S" -p "$L" -n 40 --temp 0 --json)
[ -n "$ref" ] && [ "$(runp 2 "$S" -p "$L" -n 40 --temp 0 --json)" = "$ref" ]
check "2 stages with --json (a grammar on the head's sampling): the same constrained text" $?

# --- memory: each stage re-lays out only its layers
whole=$("$BIN" info "$TL" 2>/dev/null | sed -n 's/^weights memory: *\([0-9.]*\) MiB.*/\1/p')
runp 2 "$TL" -p "$P" -n 2 --temp 0 >/dev/null
relaid=$(sed -n 's/.*stage 1 .*weights re-laid \([0-9.]*\) MiB.*/\1/p' "$TMP/runp.log")
echo "     stage 1 of 2 re-laid ${relaid:-?} MiB of the model's ${whole:-?} MiB"
python3 -c "import sys; w=float('$whole'); r=float('$relaid'); sys.exit(0 if 0.3*w < r < 0.6*w else 1)" 2>/dev/null
check "2 stages: stage 1 holds about half the weights (its layers and the output head)" $?

# --- serving through 2 stages: batch invariance against a single process
prompts=("Once upon a time" "The little dog" "Lily and Ben went to the park" "One day, a bird"
  "Tom had a red ball" "The sun was hot")
complete_to() {  # complete_to PORT PROMPT N -> the greedy text from that server
  PORT=$1 complete "" "$2" "$3"
}
start_server single -m "$S" -t 1 || exit 1
SINGLE=$PORT
for i in "${!prompts[@]}"; do complete_to "$SINGLE" "${prompts[$i]}" 48 >"$TMP/alone.$i"; done
embed() {  # embed PORT -> the embedding of a fixed text, as JSON
  curl -s -H 'Content-Type: application/json' --data-binary '{"input":"The little dog ran home."}' \
    "http://127.0.0.1:$1/v1/embeddings" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["data"][0]["embedding"]))'
}
embed "$SINGLE" >"$TMP/embed.alone"
kill "$SPID"

# start_mpi NAME NP ARGS...: paddock serve under mpirun; sets PORT, SPID (mpirun) and RANKS.
start_mpi() {
  local name=$1 np=$2
  shift 2
  "${MPI_SERVE[@]}" -np "$np" "$BIN" serve --port 0 "$@" >"$TMP/$name.out" 2>"$TMP/$name.log" &
  SPID=$!
  PIDS+=("$SPID")
  wait_ready "$name" || return 1
  RANKS=$(sed -n 's/.*pipeline stage [0-9]* (rank [0-9]* on [^,]*, pid \([0-9]*\)).*/\1/p' "$TMP/$name.log")
  PIDS+=($RANKS)
}
stop_mpi() {  # SIGTERM to mpirun (it passes it to the ranks), then wait for it
  kill "$SPID" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$SPID" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$SPID" $RANKS 2>/dev/null
}

start_mpi two 2 -m "$S" --micro-batches 3 || exit 1
for i in "${!prompts[@]}"; do complete_to "$PORT" "${prompts[$i]}" 48 >"$TMP/two.$i" & done
for job in $(jobs -p); do [ "$job" = "$SPID" ] || wait "$job"; done
ok=0
for i in "${!prompts[@]}"; do cmp -s "$TMP/alone.$i" "$TMP/two.$i" || ok=1; done
check "6 concurrent requests through 2 stages (a step in flight per stage): each prompt's text alone" $ok
embed "$PORT" >"$TMP/embed.two"
python3 - "$TMP/embed.alone" "$TMP/embed.two" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
sys.exit(0 if len(a) == len(b) > 0 and max(abs(x - y) for x, y in zip(a, b)) < 1e-5 else 1)
PY
check "/v1/embeddings through 2 stages (the last returns final hidden states): the single process's" $?

stop_mpi

# --- faults: a stage killed under load
start_mpi fault 2 -m "$TL" || exit 1
stage1=$(sed -n 's/.*pipeline stage 1 (rank 1 on [^,]*, pid \([0-9]*\)).*/\1/p' "$TMP/fault.log")
for i in 1 2 3; do
  curl -s -N -m 60 -H 'Content-Type: application/json' --data-binary \
    "{\"prompt\":\"$P\",\"max_tokens\":2000,\"ignore_eos\":true,\"stream\":true}" \
    "http://127.0.0.1:$PORT/v1/completions" >"$TMP/flight.$i" &
  eval "flight$i=\$!"
done
wait_first_chunk "$TMP/flight.1" "$flight1"
kill -9 "$stage1"
ended=0
for i in 1 2 3; do
  eval "wait \$flight$i"
  rc=$?
  [ $rc -eq 0 ] && grep -q '"error".*stopped answering' "$TMP/flight.$i" || ended=1
done
check "stage 1 SIGKILLed under load: the 3 streams in flight end with an error naming the loss" $ended
h=$(curl -s -w ' %{http_code}' "http://127.0.0.1:$PORT/health")
echo "$h" | grep -q "stage 1 (rank 1 on .*stopped answering.* 503$"
check "/health answers 503 naming stage 1" $?
r=$(curl -s -w ' %{http_code}' -H 'Content-Type: application/json' --data-binary \
  '{"prompt":"Once","max_tokens":4}' "http://127.0.0.1:$PORT/v1/completions")
echo "$r" | grep -q "pipeline_stage_lost.* 503$"
check "a new request gets a 503 naming the lost stage" $?
stop_mpi
start_mpi again 2 -m "$S" || exit 1
[ "$(complete_to "$PORT" "${prompts[0]}" 48)" = "$(cat "$TMP/alone.0")" ]
check "the job restarted serves again (the same text)" $?
stop_mpi

# --- a model over one process's budget, served by two
start_server over -m "$TL" -t 1 -c 256 --kv-memory 8M --memory-budget 250M
[ $? -ne 0 ] && grep -q "MiB more than the memory budget of 250.00 MiB" "$TMP/over.log"
check "one process refuses the 4-layer model under --memory-budget 250M" $?
grep -m1 -i "budget" "$TMP/over.log" | sed 's/^/     /'
start_mpi budget 2 -m "$TL" -c 256 --kv-memory 8M --memory-budget 250M
[ $? -eq 0 ] && [ "$(complete_to "$PORT" "$P" 24)" = "$(run1 "$TL" -p "$P" -n 24 --temp 0 | sed "s/^$P//")" ]
check "two processes serve it under the same per-process budget (the same greedy text)" $?
grep "pipeline stage" "$TMP/budget.log" | sed 's/^/     /'
stop_mpi

# --- bad input
timeout 60 "${MPI[@]}" -np 1 "$BIN" run -m "$S" -p "$P" -n 4 : -np 1 "$BIN" run -m "$TL" -p "$P" -n 4 >/dev/null 2>"$TMP/mismatch.log"
rc=$?
[ $rc -ne 0 ] && grep -q "stage 1 (rank 1 on .* has another model: .* there ($TL), .* here ($S)" "$TMP/mismatch.log"
check "a stage with another model file: one error naming what differs (exit $rc)" $?
grep -m1 "another model" "$TMP/mismatch.log" | sed 's/^/     /'
runp 2 "$S" -p "$P" -n 4 --layers 2,2 >/dev/null
[ $? -ne 0 ] && grep -q "layers '2,2' sums to 4; the model has 5 layers" "$TMP/runp.log"
check "--layers that do not add up: an error" $?
"$BIN" run -m "$S" -p "$P" -n 4 --layers 2,3 >/dev/null 2>"$TMP/nompi.log"
[ $? -eq 2 ] && grep -q "start them with mpirun" "$TMP/nompi.log"
check "--layers without mpirun: a usage error" $?

finish pipeline
