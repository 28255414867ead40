// A page from another origin calls `paddock serve` in headless Chromium: fetch() with an
// Authorization header and the headers the official JS SDK adds (x-stainless-*), a streamed chat
// answer read to its [DONE]. The browser's own preflight decides; Paddock must answer it with one
// Access-Control-Allow-Origin and the headers asked for. A page from an origin not allowed gets
// no answer it can read.
// This script starts its own page server (port 0) and its own `paddock serve` allowing that
// origin, and stops the server by its PID.
// usage: node cors.mjs PADDOCK_BIN MODEL
import puppeteer from 'puppeteer-core';
import http from 'node:http';
import { spawn } from 'node:child_process';

const [bin, model] = process.argv.slice(2);
let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} cors: ${name}${ok ? '' : ' ' + detail}`);
  if (!ok) failures++;
}

const page = `<!doctype html><meta charset="utf-8"><title>pending</title><script>
(async () => {
  const api = new URLSearchParams(location.search).get('api');
  try {
    const r = await fetch(api + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'Authorization': 'Bearer sekret', 'Content-Type': 'application/json',
                 'X-Stainless-Lang': 'js', 'X-Stainless-OS': 'Linux', 'X-Stainless-Retry-Count': '0' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 12, stream: true }),
    });
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let text = '', reads = 0;
    for (;;) { const { done, value } = await reader.read(); if (done) break; reads++; text += dec.decode(value); }
    document.title = 'ok ' + r.status + ' ' + (text.includes('data: [DONE]') ? 'done' : 'cut') + ' ' + reads;
  } catch (e) {
    document.title = 'error ' + e.name;
  }
})();
</script>`;
const pages = http.createServer((req, res) => { res.writeHead(200, { 'Content-Type': 'text/html' }); res.end(page); });
await new Promise((ok) => pages.listen(0, '127.0.0.1', ok));
const pagePort = pages.address().port;
const origin = `http://127.0.0.1:${pagePort}`;

const server = spawn(bin, ['serve', '-m', model, '--port', '0', '--cors-origin', origin, '--api-key', 'sekret', '--no-ui'], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
const apiPort = await new Promise((ok, fail) => {
  const t = setTimeout(() => fail(new Error('server did not start: ' + log)), 60000);
  server.stderr.on('data', (d) => {
    log += d;
    const m = /listening on http:\/\/[^:]*:(\d+)/.exec(log);
    if (m) { clearTimeout(t); ok(Number(m[1])); }
  });
});
const api = `http://127.0.0.1:${apiPort}`;

// The preflight as a browser sends it, over plain HTTP: exactly one Allow-Origin, the asked
// headers allowed.
const pre = await fetch(api + '/v1/chat/completions', {
  method: 'OPTIONS',
  headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization,content-type,x-stainless-lang' },
});
const rawOrigin = pre.headers.get('access-control-allow-origin');
check('preflight: 204 with one Access-Control-Allow-Origin', pre.status === 204 && rawOrigin === origin, `${pre.status} ${rawOrigin}`);
check('preflight: the asked headers are allowed', (pre.headers.get('access-control-allow-headers') ?? '').includes('x-stainless-lang'), pre.headers.get('access-control-allow-headers'));
check('preflight: Access-Control-Max-Age', Number(pre.headers.get('access-control-max-age')) > 0, pre.headers.get('access-control-max-age'));

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const timer = setTimeout(() => { console.log('FAIL cors: timed out'); server.kill('SIGKILL'); process.exit(1); }, 120000);
try {
  const tab = await browser.newPage();
  await tab.goto(`${origin}/?api=${encodeURIComponent(api)}`);
  await tab.waitForFunction(() => document.title !== 'pending', { timeout: 60000 });
  const title = await tab.title();
  check('a page from the allowed origin streams a chat answer through fetch with a key', /^ok 200 done \d+$/.test(title), title);
  // The same page from another origin (localhost is not 127.0.0.1 to a browser): refused.
  const other = await browser.newPage();
  await other.goto(`http://localhost:${pagePort}/?api=${encodeURIComponent(api)}`);
  await other.waitForFunction(() => document.title !== 'pending', { timeout: 60000 });
  const otherTitle = await other.title();
  check('a page from an origin not allowed cannot read the answer', otherTitle.startsWith('error'), otherTitle);
} finally {
  clearTimeout(timer);
  await browser.close();
  const exited = new Promise((ok) => server.on('exit', ok));
  server.kill('SIGTERM');
  const hard = setTimeout(() => server.kill('SIGKILL'), 35000);
  await exited;
  clearTimeout(hard);
  pages.close();
}
process.exit(failures === 0 ? 0 : 1);
