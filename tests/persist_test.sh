#!/usr/bin/env bash
# State that survives a restart (issue: nothing lost on restart): the KV disk tier (--kv-disk)
# and the durable response store (--data-dir), end to end with real servers.
#  - greedy text with the tier equals a server without it, before and after a restart, and the
#    restarted server reads the prompt's blocks from disk;
#  - a flipped and a truncated block file and a torn temporary file: detected, recomputed, same
#    text; stale temporaries removed;
#  - kill -9 while the tier writes under load, then a restart: every answer a cold server's;
#  - a disk that fills (a small tmpfs, where the test may mount one): writes stop, serving goes on;
#  - an unwritable --kv-disk or --data-dir: a clear error at start;
#  - the official openai client continues a conversation by previous_response_id across a
#    restart; kill -9 during a burst of stored responses keeps every answered one.
# usage: persist_test.sh PADDOCK_BINARY
set -u
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"
MODEL=$M/stories260K.gguf
if [ ! -d "$HERE/server/node_modules/openai" ]; then
  (cd "$HERE/server" && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1)
fi
MOUNTED=""
trap 'if [ -n "$MOUNTED" ]; then umount "$MOUNTED" 2>/dev/null; fi; cleanup' EXIT

text() {  # text PROMPT: the greedy completion's text (24 tokens) from $PORT
  complete stories260K "$1" 24
}
kv_files() { find "$1" -name '*.kv' 2>/dev/null | wc -l; }

# Prompts of 150-300 tokens (stories260K's context is 512): 9-18 full blocks of 16 each.
PROMPTS=()
for i in 0 1 2 3 4 5 6 7; do
  p=""
  for j in $(seq 0 $((5 + i))); do p+="Once upon a time, in a town number $((i * 10 + j)), a little girl found a red ball. "; done
  PROMPTS+=("$p")
done

# A server without the tier gives the reference text.
start_server cold -m "$MODEL" --data-dir none || exit 1
REF=()
for p in "${PROMPTS[@]}"; do REF+=("$(text "$p")"); done
stop_server "$SPID"
[ -n "${REF[0]}" ]
check "a cold server answers the prompts" $?

KV=$TMP/kv
DATA=$TMP/data
start_server a -m "$MODEL" --kv-disk "$KV" --data-dir "$DATA" || exit 1
[ "$(text "${PROMPTS[0]}")" = "${REF[0]}" ]
check "greedy text with the tier equals the text without it" $?
RID=$(cd "$HERE/server" && node stored_responses.mjs "$PORT" stories260K create)
check "the openai client stores a response" $?
stop_server "$SPID"
n=$(kv_files "$KV")
[ "$n" -ge 9 ]
check "the prompt's full blocks are on disk after the server stops ($n files)" $?

start_server b -m "$MODEL" --kv-disk "$KV" --data-dir "$DATA" || exit 1
[ "$(text "${PROMPTS[0]}")" = "${REF[0]}" ]
check "after a restart: the same text" $?
hits=$(metric paddock_kv_disk_hits_total)
[ "${hits%.*}" -ge 9 ]
check "after a restart: the prompt's blocks were read from disk ($hits blocks)" $?
(cd "$HERE/server" && node stored_responses.mjs "$PORT" stories260K continue "$RID")
check "after a restart: GET, previous_response_id and DELETE with the openai client" $?
stop_server "$SPID"

# Damage: one file's bytes flipped, one truncated, a torn temporary of a dead writer.
mapfile -t files < <(find "$KV" -name '*.kv' | sort)
python3 - "${files[0]}" "${files[1]}" <<'PY'
import os, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-5, os.SEEK_END); b = f.read(1); f.seek(-5, os.SEEK_END); f.write(bytes([b[0] ^ 0xFF]))
with open(sys.argv[2], "r+b") as f:
    f.truncate(os.path.getsize(sys.argv[2]) // 2)
PY
sub=$(dirname "${files[2]}")
head -c 1000 "${files[2]}" >"$sub/.tmp.999999999.0"  # a pid that cannot exist
start_server c -m "$MODEL" --kv-disk "$KV" --data-dir "$DATA" || exit 1
ok=0
for i in 0 1 2 3; do [ "$(text "${PROMPTS[$i]}")" = "${REF[$i]}" ] || ok=1; done
check "flipped and truncated block files: the same text" $ok
bad=$(metric paddock_kv_disk_corrupt_total)
[ "${bad%.*}" -ge 1 ] && grep -q "failed its check" "$TMP/c.log"
check "damaged block files are detected ($bad) and logged" $?
[ ! -e "$sub/.tmp.999999999.0" ]
check "a dead writer's temporary file is removed at start" $?
stop_server "$SPID"

# paddock cache warm: a prompt's blocks computed ahead; the first request reads them.
KV4=$TMP/kv4
printf '%s' "${PROMPTS[6]}" >"$TMP/warm.txt"
"$BIN" cache warm -m "$MODEL" --kv-disk "$KV4" --prompt-file "$TMP/warm.txt" 2>"$TMP/warm.log"
rc=$?
[ $rc -eq 0 ] && grep -q "blocks written" "$TMP/warm.log"
check "paddock cache warm writes a prompt's blocks" $?
start_server w -m "$MODEL" --kv-disk "$KV4" --data-dir none || exit 1
[ "$(text "${PROMPTS[6]}")" = "${REF[6]}" ]
ok=$?
hits=$(metric paddock_kv_disk_hits_total)
[ $ok -eq 0 ] && [ "${hits%.*}" -ge 10 ]
check "a warmed prompt's first request reads its blocks ($hits) and answers the same" $?
stop_server "$SPID"
out=$("$BIN" cache warm -m "$MODEL" --prompt-file "$TMP/warm.txt" 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q -- "--kv-disk"
check "cache warm without --kv-disk is a usage error" $?
out=$("$BIN" cache cool 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "unknown action 'cool'"
check "cache with an unknown action is a usage error naming it" $?

# Two servers sharing one directory: what one computes, the other reads.
KV3=$TMP/kv3
start_server x -m "$MODEL" --kv-disk "$KV3" --data-dir none || exit 1
XPID=$SPID XPORT=$PORT
start_server y -m "$MODEL" --kv-disk "$KV3" --data-dir none || exit 1
[ "$(PORT=$XPORT text "${PROMPTS[5]}")" = "${REF[5]}" ]
ok=$?
for _ in $(seq 1 200); do  # x's blocks written (after its request ended)
  [ "$(PORT=$XPORT metric paddock_kv_disk_blocks_written_total | cut -d. -f1)" -ge 10 ] && break
  sleep 0.02
done
[ "$(text "${PROMPTS[5]}")" = "${REF[5]}" ] || ok=1
hits=$(metric paddock_kv_disk_hits_total)
[ $ok -eq 0 ] && [ "${hits%.*}" -ge 10 ]
check "two servers on one directory: the second reads the first's blocks ($hits) and answers the same" $?
stop_server "$SPID"
stop_server "$XPID"

# kill -9 while the tier writes under load; a restart answers as a cold server.
KV2=$TMP/kv2
start_server d -m "$MODEL" --kv-disk "$KV2" --data-dir none || exit 1
cpids=()
for p in "${PROMPTS[@]}"; do
  text "$p" >/dev/null 2>&1 &
  cpids+=($!)
done
for _ in $(seq 1 500); do  # the first finished request's blocks are being written
  [ "$(metric paddock_kv_disk_blocks_written_total | cut -d. -f1)" -ge 1 ] && break
  sleep 0.01
done
kill -9 "$SPID"
wait "$SPID" 2>/dev/null
for c in "${cpids[@]}"; do wait "$c" 2>/dev/null; done
start_server e -m "$MODEL" --kv-disk "$KV2" --data-dir none || exit 1
ok=0
for i in "${!PROMPTS[@]}"; do [ "$(text "${PROMPTS[$i]}")" = "${REF[$i]}" ] || ok=1; done
check "kill -9 while writing, then a restart: every answer equals a cold server's" $ok
stop_server "$SPID"

# A disk that fills: a 64 KiB tmpfs holds a few blocks; writes stop, serving goes on.
SMALL=$TMP/small
mkdir -p "$SMALL"
if mount -t tmpfs -o size=64k tmpfs "$SMALL" 2>/dev/null; then
  MOUNTED=$SMALL
  start_server f -m "$MODEL" --kv-disk "$SMALL" --kv-disk-budget 1G --data-dir none || exit 1
  ok=0
  for i in 0 1 2 3 4 5; do [ "$(text "${PROMPTS[$i]}")" = "${REF[$i]}" ] || ok=1; done
  for _ in $(seq 1 200); do  # the writer reaches the full disk
    [ "$(metric paddock_kv_disk_writes_stopped)" = 1 ] && break
    sleep 0.05
  done
  [ "$(text "${PROMPTS[7]}")" = "${REF[7]}" ] || ok=1
  check "a full disk: every answer is still right" $ok
  [ "$(metric paddock_kv_disk_writes_stopped)" = 1 ] &&
    [ "$(grep -c 'writes stopped' "$TMP/f.log")" = 1 ]
  check "a full disk: writes stop with one log line and a metric" $?
  stop_server "$SPID"
  umount "$SMALL" && MOUNTED=""
else
  echo "skip a full disk: cannot mount a tmpfs here (not root)"
fi

# Unwritable directories: a clear error at start.
echo x >"$TMP/file"
out=$("$BIN" serve -m "$MODEL" --port 0 --kv-disk "$TMP/file/kv" --data-dir none 2>&1)
rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q -- "--kv-disk $TMP/file/kv"
check "an unwritable --kv-disk is an error at start naming it" $?
out=$("$BIN" serve -m "$MODEL" --port 0 --data-dir "$TMP/file/data" 2>&1)
rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q -- "--data-dir $TMP/file/data"
check "an unwritable --data-dir is an error at start naming it" $?
XDG_DATA_HOME="$TMP/file" start_server z -m "$MODEL" || exit 1
[ "$(text "${PROMPTS[0]}")" = "${REF[0]}" ] && grep -q "kept in memory" "$TMP/z.log"
check "an unusable default data directory (a read-only home): responses in memory, serving goes on" $?
stop_server "$SPID"
out=$("$BIN" run -m "$MODEL" -p hi -n 1 --kv-disk-budget 1G 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q -- "--kv-disk-budget needs --kv-disk"
check "--kv-disk-budget without --kv-disk is a usage error" $?

# kill -9 during a burst of stored responses: every response answered before it is kept.
DATA2=$TMP/data2
start_server g -m "$MODEL" --data-dir "$DATA2" || exit 1
(cd "$HERE/server" && node stored_responses.mjs "$PORT" stories260K burst 96 >"$TMP/burst.ids") &
bpid=$!
for _ in $(seq 1 1000); do
  [ "$(wc -l <"$TMP/burst.ids")" -ge 3 ] && break
  kill -0 "$bpid" 2>/dev/null || break
  sleep 0.01
done
kill -9 "$SPID"
wait "$SPID" 2>/dev/null
wait "$bpid" 2>/dev/null
mapfile -t ids <"$TMP/burst.ids"
start_server h -m "$MODEL" --data-dir "$DATA2" || exit 1
echo "burst: ${#ids[@]} of 96 stored responses answered before the kill"
[ "${#ids[@]}" -ge 3 ] && (cd "$HERE/server" && node stored_responses.mjs "$PORT" stories260K get "${ids[@]}" 2>&1 | grep -v '^ok'; exit "${PIPESTATUS[0]}")
check "kill -9 during a burst: all ${#ids[@]} answered responses are stored after a restart" $?
stop_server "$SPID"

# --- faults in the stored data (issue: faults answered honestly)
# A FIFO where a block file goes, a link where a subdirectory goes: the prompt is answered (the
# FIFO is never waited on), an unrelated request too, SIGTERM stops the server, and no block
# file lands outside the directory.
KVF=$TMP/kvf
start_server fa -m "$MODEL" --kv-disk "$KVF" --data-dir none || exit 1
text "${PROMPTS[0]}" >/dev/null
stop_server "$SPID"
mapfile -t fkv < <(find "$KVF" -name '*.kv' | sort)
rm -f "${fkv[0]}" && mkfifo "${fkv[0]}"
mkdir -p "$TMP/outside"
victim_sub=$(dirname "${fkv[$((${#fkv[@]} - 1))]}")
[ "$victim_sub" != "$(dirname "${fkv[0]}")" ] && rm -rf "$victim_sub" && ln -s "$TMP/outside" "$victim_sub"
start_server fb -m "$MODEL" --kv-disk "$KVF" --data-dir none || exit 1
got0=$(timeout 20 bash -c "$(declare -f text complete json_get); PORT=$PORT text '${PROMPTS[0]}'")
expect_eq "a FIFO in the KV directory: the prompt is answered, the same text" "$got0" "${REF[0]}"
got1=$(timeout 20 bash -c "$(declare -f text complete json_get); PORT=$PORT text '${PROMPTS[1]}'")
expect_eq "... and an unrelated request" "$got1" "${REF[1]}"
refused=$(metric paddock_kv_disk_refused_total)
[ "${refused%.*}" -ge 1 ]
check "the FIFO is refused and counted" $? "paddock_kv_disk_refused_total $refused"
timeout 20 bash -c "kill -TERM $SPID; while kill -0 $SPID 2>/dev/null; do sleep 0.05; done"
check "SIGTERM still stops the server" $?
wait "$SPID" 2>/dev/null
[ -z "$(find "$TMP/outside" -name '*.kv')" ]
check "a linked subdirectory is not followed: no block file lands outside" $? "$(find "$TMP/outside")"

# A model file rewritten in place with its times put back: its blocks are not reused.
EDIT=$TMP/edited.gguf
cp "$MODEL" "$EDIT"
KVE=$TMP/kve
start_server ea -m "$EDIT" --kv-disk "$KVE" --data-dir none || exit 1
text "${PROMPTS[2]}" >/dev/null
stop_server "$SPID"
"$BIN" synth --shape stories260k --type f32 --seed 9 -o "$TMP/other.gguf" >/dev/null 2>&1
python3 - "$EDIT" "$TMP/other.gguf" <<'PY'
import os, sys
# Same size, other weights: the other file's tensor bytes written over the tail of this one
# in place (the inode, the size and, put back below, the times stay).
path, other = sys.argv[1], sys.argv[2]
st = os.stat(path)
size = st.st_size
data = open(other, 'rb').read()
n = min(len(data), size) // 2
with open(path, 'r+b') as f:
    f.seek(size - n)
    f.write(data[-n:])
os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
PY
start_server eb -m "$EDIT" --kv-disk "$KVE" --data-dir none || exit 1
text "${PROMPTS[2]}" >/dev/null
hits=$(metric paddock_kv_disk_hits_total)
expect_eq "a model file rewritten in place (times put back): no block reused" "${hits%.*}" 0
stop_server "$SPID"

# A damaged response database: moved aside with one line naming both files, a fresh one used
# (a new response stored and read back); with --responses-if-damaged refuse, an error at start.
DATA3=$TMP/data3
start_server da -m "$MODEL" --data-dir "$DATA3" || exit 1
(cd "$HERE/server" && node stored_responses.mjs "$PORT" stories260K burst 40 >/dev/null)
stop_server "$SPID"
size=$(stat -c %s "$DATA3/responses.sqlite3")
dd if=/dev/urandom of="$DATA3/responses.sqlite3" bs=1024 count=8 seek=$((size / 2048)) conv=notrunc 2>/dev/null
out=$("$BIN" serve -m "$MODEL" --port 0 --data-dir "$DATA3" --responses-if-damaged refuse 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q "is damaged"
check "a damaged database with --responses-if-damaged refuse: an error at start" $? "$out"
start_server db -m "$MODEL" --data-dir "$DATA3" || exit 1
grep -q "moved aside to $DATA3/responses.sqlite3.damaged-" "$TMP/db.log"
check "a damaged database: one line naming it and where it was moved" $? "$(grep damaged "$TMP/db.log")"
(cd "$HERE/server" && node stored_responses.mjs "$PORT" stories260K burst 2 >"$TMP/fresh.ids")
mapfile -t fresh <"$TMP/fresh.ids"
[ "${#fresh[@]}" = 2 ] && (cd "$HERE/server" && node stored_responses.mjs "$PORT" stories260K get "${fresh[@]}" >/dev/null 2>&1)
check "a damaged database: new responses stored in the fresh one and read back" $?
stop_server "$SPID"

# Ids: unguessable (128 random bits); with several keys, a response only for the key that
# stored it; no server path in a 404.
start_server ka -m "$MODEL" --data-dir "$DATA3" --api-key key-one --api-key key-two || exit 1
resp() {  # resp KEY -> the stored response's id
  curl -s "$U/v1/responses" -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
    -d '{"model":"stories260K","input":"Once upon a time","max_output_tokens":4}' | json_get 'd["id"]'
}
id1=$(resp key-one)
id2=$(resp key-one)
python3 - "$id1" "$id2" <<'PY'
import sys
a, b = (x.split("_", 1)[1] for x in sys.argv[1:])
assert len(a) == len(b) == 32 and int(a, 16) >= 0, (a, b)
assert sum(x == y for x, y in zip(a, b)) < 12, (a, b)  # no shared prefix or counter
PY
check "two consecutive ids share no predictable part" $? "$id1 $id2"
code_of() { curl -s -o "$TMP/kb" -w '%{http_code}' "$@"; }
expect_eq "the storing key reads its response" "$(code_of -H 'Authorization: Bearer key-one' "$U/v1/responses/$id1")" 200
expect_eq "another key's GET: 404" "$(code_of -H 'Authorization: Bearer key-two' "$U/v1/responses/$id1")" 404
expect_eq "another key's DELETE: 404" "$(code_of -X DELETE -H 'Authorization: Bearer key-two' "$U/v1/responses/$id1")" 404
expect_eq "... and the response is still there" "$(code_of -H 'Authorization: Bearer key-one' "$U/v1/responses/$id1")" 200
c=$(code_of -H 'Authorization: Bearer key-two' -H 'Content-Type: application/json' "$U/v1/responses" \
  -d "{\"model\":\"stories260K\",\"input\":\"more\",\"previous_response_id\":\"$id1\"}")
[ "$c" = 404 ] && ! grep -q "$DATA3" "$TMP/kb"
check "another key's previous_response_id: 404 naming no server path" $? "$c $(cat "$TMP/kb")"
c=$(code_of -H 'x-api-key: wrong' -H 'Content-Type: application/json' "$U/v1/messages" -d '{}')
[ "$c" = 401 ] && grep -q "not valid" "$TMP/kb"
check "a wrong x-api-key is told the key is not valid" $? "$c $(cat "$TMP/kb")"
stop_server "$SPID"

finish persist
