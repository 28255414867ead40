#!/usr/bin/env bash
# Images in, text out (vision/clip.h, engine/images.h) on the synthetic vision presets:
#   - each family (LLaVA MLP, Gemma 3, SmolVLM / Idefics3) runs `paddock run --image` (PNG and
#     GIF written byte by byte here); the same image gives the same text, another image another
#     text; `paddock chat` with /image;
#   - the server: OpenAI image_url parts (data: URLs), Anthropic image blocks and Ollama's
#     images give the same greedy text for the same image and prompt; the second turn about
#     an image finds its prompt in the prefix cache; concurrent image + text requests give each
#     its text alone (batch invariance);
#   - bad input: truncated and corrupt images, a 100,000 x 100,000 PNG header, an animated GIF
#     (its first frame), a non-image data: URL, a remote URL, a projector for another model,
#     an image sent to a text-only model (400 naming the model).
# usage: vision_test.sh PADDOCK_BIN
set -uo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
for s in tiny-llava tiny-gemma3 tiny-smolvlm; do
  "$BIN" synth --shape $s --type q8_0 -o "$TMP/$s.gguf" --mmproj "$TMP/$s-mm.gguf" >/dev/null 2>&1
done
# Images written byte by byte (python3's zlib): PNGs, a GIF with two frames, broken files.
python3 - "$TMP" <<'EOF'
import struct, sys, zlib
d = sys.argv[1]
def chunk(t, b): return struct.pack('>I', len(b)) + t + b + struct.pack('>I', zlib.crc32(t + b) & 0xffffffff)
def png(w, h, f):
    raw = b''.join(b'\0' + bytes(f(x, y, c) for x in range(w) for c in range(3)) for y in range(h))
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) +
            chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
a = png(64, 64, lambda x, y, c: (x * 4 + y * 2 + c * 60) % 256)
open(d + '/a.png', 'wb').write(a)
open(d + '/b.png', 'wb').write(png(64, 64, lambda x, y, c: (x * 7 + y * 9 + c * 20) % 256))
open(d + '/wide.png', 'wb').write(png(100, 60, lambda x, y, c: (x * 3 + y * 5 + c * 40) % 256))
open(d + '/trunc.png', 'wb').write(a[:len(a) // 2])
open(d + '/corrupt.png', 'wb').write(a[:60] + bytes(b ^ 0x5a for b in a[60:]))
bomb = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 100000, 100000, 8, 2, 0, 0, 0))
open(d + '/bomb.png', 'wb').write(bomb + chunk(b'IDAT', zlib.compress(b'\0' * 300001)[:64]))
open(d + '/text.bin', 'wb').write(b'hello, this is not an image at all')
# GIF89a, 4x4, two frames (the first red, the second blue), global 2-colour table.
def lzw4(indices):  # minimum code size 2 (3-bit codes): a clear code before every 2 pixels
    codes = []     # keeps the decoder's table below 8 entries, so the width stays 3 bits
    for k in range(0, len(indices), 2): codes += [4] + indices[k:k + 2]
    codes += [5]
    bits, n, out = 0, 0, bytearray()
    width = 3
    for i, c in enumerate(codes):
        bits |= c << n; n += width
        while n >= 8: out.append(bits & 255); bits >>= 8; n -= 8
    if n: out.append(bits & 255)
    return bytes(out)
def frame(idx):
    data = lzw4([idx] * 16)
    return (b'\x21\xf9\x04\x00\x0a\x00\x00\x00' + b'\x2c' + struct.pack('<HHHH', 0, 0, 4, 4) + b'\x00' +
            b'\x02' + bytes([len(data)]) + data + b'\x00')
gif = (b'GIF89a' + struct.pack('<HH', 4, 4) + b'\x80\x00\x00' + b'\xff\x00\x00' + b'\x00\x00\xff' +
       b'\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00' + frame(0) + frame(1) + b'\x3b')
open(d + '/anim.gif', 'wb').write(gif)
EOF

run() {  # run FAMILY IMAGE: greedy text (stdout), errors to $TMP/run.err
  "$BIN" run -m "$TMP/$1.gguf" --mmproj "$TMP/$1-mm.gguf" --image "$2" -p "Describe it" -n 12 \
    --temp 0 -t 2 2>"$TMP/run.err"
}
for s in tiny-llava tiny-gemma3 tiny-smolvlm; do
  a1=$(run $s "$TMP/a.png")
  check "$s: run --image gives text" $([ -n "$a1" ] && [ "$a1" != "Describe it" ] && echo 0 || echo 1)
  a2=$(run $s "$TMP/a.png")
  check "$s: the same image gives the same text" $([ "$a1" = "$a2" ] && echo 0 || echo 1)
  b1=$(run $s "$TMP/b.png")
  check "$s: another image gives another text" $([ "$a1" != "$b1" ] && echo 0 || echo 1)
  w1=$(run $s "$TMP/wide.png")
  check "$s: a 100x60 image (resized / tiled)" $([ -n "$w1" ] && echo 0 || echo 1)
done
run tiny-smolvlm "$TMP/wide.png" >/dev/null
grep -q "prompt is" "$TMP/run.err"
check "smolvlm: tiles encoded" $?

bad_image() {  # bad_image NAME FILE PATTERN: run fails (exit 1, no crash) naming the problem
  run tiny-gemma3 "$2" >/dev/null
  local rc=$?
  grep -qi "$3" "$TMP/run.err"
  local named=$?
  check "bad input: $1" $([ $rc = 1 ] && [ $named = 0 ] && echo 0 || echo 1) \
    "exit $rc (want 1): $(head -c 200 "$TMP/run.err") (want '$3')"
}
bad_image "truncated PNG" "$TMP/trunc.png" "truncated or corrupt"
bad_image "corrupt PNG" "$TMP/corrupt.png" "corrupt"
bad_image "100000 x 100000 PNG header" "$TMP/bomb.png" "100000 x 100000 pixels; the limit"
bad_image "not an image" "$TMP/text.bin" "not an image Paddock can read"
g=$(run tiny-gemma3 "$TMP/anim.gif")
check "animated GIF: its first frame is read" $([ $? = 0 ] && [ -n "$g" ] && echo 0 || echo 1)
"$BIN" run -m "$TMP/tiny-gemma3.gguf" --mmproj "$TMP/tiny-smolvlm-mm.gguf" --image "$TMP/a.png" -p x -n 2 2>"$TMP/mis.err" >/dev/null
grep -q "a projector for another model" "$TMP/mis.err"
check "a projector for another model: one error naming it" $?
"$BIN" synth --shape tiny-llava --type q8_0 -o "$TMP/x.gguf" --mmproj "$TMP/x-mm.gguf" >/dev/null 2>&1
"$BIN" run -m "$TMP/x.gguf" --mmproj "$TMP/x.gguf" -p x -n 2 2>"$TMP/mis2.err" >/dev/null
grep -q "not a vision projector" "$TMP/mis2.err"
check "a text model given as --mmproj: named" $?
"$BIN" run -m "$TMP/x.gguf" --image "$TMP/a.png" -p x -n 2 2>"$TMP/mis3.err" >/dev/null
grep -q "needs --mmproj" "$TMP/mis3.err"
check "--image without --mmproj: usage error" $?

# paddock chat: /image FILE goes with the next message; a bad one drops that message only.
printf '/image %s\nWhat is it?\n/image %s\nAnd this?\nStill here?\n' "$TMP/a.png" "$TMP/text.bin" |
  "$BIN" chat -m "$TMP/tiny-gemma3.gguf" --mmproj "$TMP/tiny-gemma3-mm.gguf" --temp 0 -n 6 -t 2 \
    >"$TMP/chat.out" 2>"$TMP/chat.err"
[ $? = 0 ] && grep -q "attached to your next message" "$TMP/chat.err" &&
  grep -q "not an image Paddock can read.*the message is dropped" "$TMP/chat.err" &&
  [ "$(grep -c . "$TMP/chat.out")" -ge 2 ]
check "chat: /image attaches an image; a bad one drops its message, the session goes on" $?

# ---- the server ----
start_server gemma -m "$TMP/tiny-gemma3.gguf" --mmproj "$TMP/tiny-gemma3-mm.gguf" -t 2 || exit 1
B64=$(base64 -w0 "$TMP/a.png")
B64B=$(base64 -w0 "$TMP/b.png")
openai() {  # openai B64 TEXT -> the response
  local f
  f=$(mktemp -p "$TMP")
  printf '{"model":"tiny-gemma3","messages":[{"role":"user","content":[{"type":"text","text":"%s"},{"type":"image_url","image_url":{"url":"data:image/png;base64,%s"}}]}],"max_tokens":10,"temperature":0}' "$2" "$1" >"$f"
  curl -s "$U/v1/chat/completions" -H 'content-type: application/json' -d @"$f"
}
content() { python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])'; }
r1=$(openai "$B64" "What is in the picture?")
t1=$(content <<<"$r1")
check "OpenAI image_url part: a reply" $([ -n "$t1" ] && echo 0 || echo 1)
r2=$(openai "$B64" "What is in the picture?")
c2=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens_details"]["cached_tokens"])' <<<"$r2")
check "second turn about the image: prefix cache hit ($c2 tokens)" $([ "${c2:-0}" -gt 16 ] && [ "$(content <<<"$r2")" = "$t1" ] && echo 0 || echo 1)
tiles=$(curl -s "$U/metrics" | sed -n 's/^paddock_image_tiles_encoded_total{[^}]*} \([0-9]*\).*/\1/p')
expect_eq "the image was encoded once (tiles encoded)" "$tiles" 1
# Anthropic's image block and Ollama's images: the same request, the same text.
printf '{"model":"tiny-gemma3","max_tokens":10,"temperature":0,"messages":[{"role":"user","content":[{"type":"text","text":"What is in the picture?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"%s"}}]}]}' "$B64" >"$TMP/anth.json"
ta=$(curl -s "$U/v1/messages" -H 'content-type: application/json' -d @"$TMP/anth.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["content"][0]["text"])')
expect_eq "Anthropic image block: the same text" "$ta" "$t1"
printf '{"model":"tiny-gemma3","stream":false,"options":{"temperature":0,"num_predict":10},"messages":[{"role":"user","content":"What is in the picture?","images":["%s"]}]}' "$B64" >"$TMP/oll.json"
to=$(curl -s "$U/api/chat" -d @"$TMP/oll.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["message"]["content"])')
expect_eq "Ollama images: the same text" "$to" "$t1"
# Batch invariance: 4 image requests (2 images) and 2 text ones at once, each its text alone.
tb=$(openai "$B64B" "Tell me" | content)
tt=$(curl -s "$U/v1/chat/completions" -d '{"model":"tiny-gemma3","messages":[{"role":"user","content":"Just text"}],"max_tokens":10,"temperature":0}' | content)
CL=()
for i in 1 2 3; do
  (openai "$B64" "What is in the picture?" | content >"$TMP/c$i.a") &
  CL+=($!)
  (openai "$B64B" "Tell me" | content >"$TMP/c$i.b") &
  CL+=($!)
done
for i in 1 2; do
  (curl -s "$U/v1/chat/completions" -d '{"model":"tiny-gemma3","messages":[{"role":"user","content":"Just text"}],"max_tokens":10,"temperature":0}' | content >"$TMP/c$i.t") &
  CL+=($!)
done
for j in "${CL[@]}"; do wait "$j"; done
ok=0
for i in 1 2 3; do
  [ "$(cat "$TMP/c$i.a")" = "$t1" ] || ok=1
  [ "$(cat "$TMP/c$i.b")" = "$tb" ] || ok=1
done
for i in 1 2; do [ "$(cat "$TMP/c$i.t")" = "$tt" ] || ok=1; done
check "batch invariance: concurrent image and text requests each give their text alone" $ok
# n = 2 on an image prompt: the choices fork the prompt's KV (and keep its image rows).
printf '{"model":"tiny-gemma3","n":2,"messages":[{"role":"user","content":[{"type":"text","text":"What is in the picture?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,%s"}}]}],"max_tokens":10,"temperature":0}' "$B64" >"$TMP/n2.json"
n2=$(curl -s "$U/v1/chat/completions" -d @"$TMP/n2.json" | python3 -c 'import json,sys; print("|".join(c["message"]["content"] for c in json.load(sys.stdin)["choices"]))')
expect_eq "n = 2 on an image prompt: both choices give the greedy text" "$n2" "$t1|$t1"
code() { curl -s -o "$TMP/err.json" -w '%{http_code}' "$U/v1/chat/completions" -d "$1"; }
c=$(code '{"model":"tiny-gemma3","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]}')
check "remote image URL: 400 (nothing fetched)" $([ "$c" = 400 ] && grep -q "not fetched" "$TMP/err.json" && echo 0 || echo 1) "$c $(head -c 200 "$TMP/err.json")"
c=$(code '{"model":"tiny-gemma3","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:text/plain;base64,aGVsbG8="}}]}]}')
check "non-image data: URL: 400" $([ "$c" = 400 ] && grep -q "not an image" "$TMP/err.json" && echo 0 || echo 1) "$c $(head -c 200 "$TMP/err.json")"
c=$(code '{"model":"tiny-gemma3","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,aGVsbG8gd29ybGQ="}}]}]}')
check "undecodable image: 400 naming it" $([ "$c" = 400 ] && grep -q "not an image Paddock can read" "$TMP/err.json" && echo 0 || echo 1) "$c $(head -c 200 "$TMP/err.json")"
BOMB=$(base64 -w0 "$TMP/bomb.png")
c=$(code "{\"model\":\"tiny-gemma3\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,$BOMB\"}}]}]}")
check "decompression bomb header: 400" $([ "$c" = 400 ] && grep -q "limit" "$TMP/err.json" && echo 0 || echo 1) "$c $(head -c 200 "$TMP/err.json")"
curl -s -o /dev/null "$U/health"
check "the server is still up" $?
start_server text -m "$TMP/x.gguf" -t 1 || exit 1
c=$(curl -s -o "$TMP/err.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" -d "{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,$B64\"}}]}]}")
check "an image to a text-only model: 400 naming the model" $([ "$c" = 400 ] && grep -q "'x' reads text only" "$TMP/err.json" && echo 0 || echo 1) "$c $(head -c 200 "$TMP/err.json")"

# Among several models (--models-dir): a projector lying beside its model (as the downloads
# come) is paired with it, not served as a model; models.json names one with "mmproj".
stop_text=$SPID
kill -TERM "$stop_text" 2>/dev/null
mkdir -p "$TMP/mdir/vlm" "$TMP/mdir2"
cp "$TMP/tiny-gemma3.gguf" "$TMP/mdir/vlm/tiny-gemma3.gguf"
cp "$TMP/tiny-gemma3-mm.gguf" "$TMP/mdir/vlm/mmproj-tiny-gemma3-f16.gguf"
cp "$TMP/x.gguf" "$TMP/mdir/x.gguf"
start_server multi --models-dir "$TMP/mdir" -t 2 || exit 1
ids=$(curl -s "$U/v1/models" | python3 -c 'import json,sys; print(" ".join(sorted(m["id"] for m in json.load(sys.stdin)["data"])))')
expect_eq "a projector beside its model is not served as a model" "$ids" "tiny-gemma3 x"
expect_eq "a projector beside its model: the same image reply as -m --mmproj" \
  "$(content <<<"$(openai "$B64" "What is in the picture?")")" "$t1"
kill -TERM "$SPID" 2>/dev/null
cp "$TMP/tiny-gemma3.gguf" "$TMP/mdir2/model.gguf"
cp "$TMP/tiny-gemma3-mm.gguf" "$TMP/mdir2/vision-encoder.bin"
echo '{"models": {"tiny-gemma3": {"file": "model.gguf", "mmproj": "vision-encoder.bin"}}}' >"$TMP/mdir2/models.json"
start_server multi2 --models-dir "$TMP/mdir2" -t 2 || exit 1
expect_eq "models.json's \"mmproj\": the same image reply" \
  "$(content <<<"$(openai "$B64" "What is in the picture?")")" "$t1"
echo '{"models": {"tiny-gemma3": {"file": "model.gguf", "mmproj": "nowhere.gguf"}}}' >"$TMP/mdir2/models.json"
out=$("$BIN" serve --models-dir "$TMP/mdir2" --port 0 2>&1)
check "models.json naming a missing projector: an error at start naming it" $(echo "$out" | grep -q "nowhere.gguf" && echo 0 || echo 1)

finish vision
