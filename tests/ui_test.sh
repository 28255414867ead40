#!/usr/bin/env bash
# The web page of `paddock serve` in a real browser: headless Chromium (Debian's chromium)
# driven by puppeteer-core (tests/ui/ui.mjs): chat streaming, stop, regenerate, HTML answers
# shown as text, the dashboard moving under the load generator, images attached. Also: the page's files and
# headers over curl, --no-ui. Screenshots go to $PADDOCK_UI_SHOTS (default: a temporary dir).
# usage: ui_test.sh PADDOCK_BIN LOADGEN_BIN
set -uo pipefail
BIN=$1
LOADGEN=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"

# A model slow enough to stop mid-answer: TinyLlama's width and vocabulary, 2 layers, random
# weights (about 60 tokens/s here).
"$BIN" synth --shape tinyllama --type q4_0 --layers 2 --ctx 4096 -o "$TMP/slow.gguf" >/dev/null 2>&1
check "synthetic model written" $?
start_server ui -m "$TMP/slow.gguf" --served-model-name slow || exit 1

h=$(curl -s -D - -o "$TMP/index" "http://127.0.0.1:$PORT/")
grep -q '^HTTP/1.1 200' <<<"$h" && grep -qi "^content-security-policy: default-src 'none'; script-src 'self'" <<<"$h" &&
  grep -qi '^content-type: text/html' <<<"$h" && grep -q '<script src="/ui/app.js"' "$TMP/index"
check "GET / serves the page with a strict Content-Security-Policy" $?
[ "$(curl -s -o /dev/null -w '%{http_code} %{content_type}' "http://127.0.0.1:$PORT/ui/app.js")" = "200 text/javascript; charset=utf-8" ]
check "the script is served" $?
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$PORT/")" = 405 ]
check "POST / is 405" $?
! grep -v '^ *//' "$HERE/../ui/app.js" | grep -q 'innerHTML\|outerHTML\|insertAdjacentHTML\|document.write\|eval('

check "the page's script never parses markup from strings" $?

SHOTS=${PADDOCK_UI_SHOTS:-$TMP}
mkdir -p "$SHOTS"
node "$HERE/ui/ui.mjs" "$PORT" "$LOADGEN" "$SHOTS"
check "the page in headless Chromium (puppeteer-core)" $?
kill -9 "$SPID" 2>/dev/null

node "$HERE/ui/cors.mjs" "$BIN" "$M/stories260K.gguf"
check "a page from another origin calls the API in headless Chromium (CORS)" $?

# Several models (--models-dir): the picker lists them, a chat goes to the one picked (it loads
# first), the dashboard shows memory per loaded model.
mkdir -p "$TMP/models"
cp "$M/stories260K.gguf" "$TMP/models/stories.gguf"
"$BIN" synth --shape tiny --type q8_0 -o "$TMP/models/tiny.gguf" >/dev/null 2>&1
start_server models --models-dir "$TMP/models" --kv-disk "$TMP/kvdisk" || exit 1
node "$HERE/ui/models.mjs" "$PORT"
check "the page picks a model among several and shows memory per model and the KV disk tier (headless Chromium)" $?
kill -9 "$SPID" 2>/dev/null

# A vision model: images attached by the file picker and by paste go with the message.
"$BIN" synth --shape tiny-gemma3 --type q8_0 -o "$TMP/vlm.gguf" --mmproj "$TMP/vlm-mm.gguf" >/dev/null 2>&1
python3 - "$TMP/pic.png" <<'PY'
import struct, sys, zlib
w = h = 48
raw = b''.join(b'\0' + bytes((x * 5 + y * 3 + c * 80) % 256 for x in range(w) for c in range(3)) for y in range(h))
ch = lambda t, b: struct.pack('>I', len(b)) + t + b + struct.pack('>I', zlib.crc32(t + b) & 0xffffffff)
open(sys.argv[1], 'wb').write(b'\x89PNG\r\n\x1a\n' + ch(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + ch(b'IDAT', zlib.compress(raw)) + ch(b'IEND', b''))
PY
start_server vlm -m "$TMP/vlm.gguf" --mmproj "$TMP/vlm-mm.gguf" || exit 1
node "$HERE/ui/images.mjs" "$PORT" "$TMP/pic.png"
check "the page attaches images (file picker, paste) and sends them (headless Chromium)" $?
kill -9 "$SPID" 2>/dev/null

start_server noui -m "$M/stories260K.gguf" --no-ui || exit 1
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/")" = 404 ] &&
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/ui/app.js")" = 404 ]
check "--no-ui: no page" $?

finish ui
