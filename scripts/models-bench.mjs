// Several models on one server (`paddock serve --models-dir`), measured in interleaved rounds
// (medians):
//   switch: with a budget that holds one model, the time of a 1-token request to a model that
//     was just evicted, its file still in the page cache (warm) and dropped from it (cold:
//     `dd iflag=nocache count=0`), against the same request to the loaded model; and the load
//     time the server reports (paddock_model_last_load_seconds);
//   together: STREAMS streams of TOKENS tokens to model A alone, to B alone, and to both at once
//     (STREAMS each): decode tokens/s per model and in all.
// usage: node scripts/models-bench.mjs PADDOCK_BIN MODEL_A.gguf MODEL_B.gguf [--rounds 5]
//        [--streams 4] [--tokens 64]
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, symlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const args = process.argv.slice(2);
if (args.length < 3) {
  console.error('usage: node scripts/models-bench.mjs PADDOCK_BIN MODEL_A MODEL_B [--rounds N] [--streams N] [--tokens N]');
  process.exit(2);
}
const [bin, fileA, fileB] = args;
const opt = { rounds: 5, streams: 4, tokens: 64 };
for (let i = 3; i < args.length; i += 2) {
  const k = args[i].replace(/^--/, '');
  if (!(k in opt) || !/^[0-9]+$/.test(args[i + 1] ?? '')) {
    console.error(`models-bench: bad option '${args[i]} ${args[i + 1] ?? ''}'`);
    process.exit(2);
  }
  opt[k] = Number(args[i + 1]);
}
const dir = mkdtempSync(join(tmpdir(), 'models-bench-'));
symlinkSync(resolve(fileA), join(dir, 'a.gguf'));
symlinkSync(resolve(fileB), join(dir, 'b.gguf'));
const median = (v) => { const s = [...v].sort((x, y) => x - y); return s[Math.floor((s.length - 1) / 2)]; };
const now = () => performance.now() / 1000;

async function serve(extra) {
  const p = spawn(bin, ['serve', '--models-dir', dir, '--port', '0', ...extra], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((ok, fail) => {
    p.stderr.on('data', (d) => {
      log += d;
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m && /model 'b'/.test(log)) ok(Number(m[1]));
    });
    p.on('exit', (c) => fail(new Error(`server exited ${c}: ${log}`)));
  });
  return { p, port, log: () => log };
}
async function complete(port, model, tokens, stream = false) {
  const t0 = now();
  const r = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: tokens, temperature: 0, ignore_eos: true }),
  });
  const j = await r.json();
  if (r.status !== 200) throw new Error(`${model}: ${r.status} ${JSON.stringify(j)}`);
  return { seconds: now() - t0, tokens: j.usage.completion_tokens };
}
async function metric(port, name, model) {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{model_name="${model}"}`));
  return parseFloat(line.split(' ').pop());
}
const dropCache = (f) => execFileSync('dd', [`if=${resolve(f)}`, 'iflag=nocache', 'count=0'], { stdio: 'ignore' });

// What each model holds, from the server's estimate; a budget for the larger one alone.
const probe = await serve([]);
const mib = (s) => { const m = /([0-9.]+) (KiB|MiB|GiB)/.exec(s); return parseFloat(m[1]) * { KiB: 1 / 1024, MiB: 1, GiB: 1024 }[m[2]]; };
const est = {};
for (const id of ['a', 'b']) {
  const line = probe.log().split('\n').find((l) => l.includes(`model '${id}'`));
  const parts = /weights ([^,]+), KV ([^,]+), scratch ([^)]+)\)/.exec(line);
  est[id] = mib(parts[1]) + mib(parts[2]) + mib(parts[3]);
}
probe.p.kill();
const budget = Math.ceil(Math.max(est.a, est.b) * 1.2);

// --- switch
const s1 = await serve(['--memory-budget', `${budget}M`]);
await complete(s1.port, 'a', 1);
const loaded = [], warm = [], cold = [], warmLoad = [], coldLoad = [];
for (let r = 0; r < opt.rounds; r++) {
  loaded.push((await complete(s1.port, 'a', 1)).seconds);
  warm.push((await complete(s1.port, 'b', 1)).seconds);  // evicts a; b's file is cached
  warmLoad.push(await metric(s1.port, 'paddock_model_last_load_seconds', 'b'));
  dropCache(fileA);  // a is not loaded now: its pages leave the cache
  cold.push((await complete(s1.port, 'a', 1)).seconds);
  coldLoad.push(await metric(s1.port, 'paddock_model_last_load_seconds', 'a'));
}
s1.p.kill();
console.log(`budget ${budget} MiB (one model: a ${est.a.toFixed(0)} MiB, b ${est.b.toFixed(0)} MiB estimated)`);
console.log(`switch: 1-token request to the loaded model ${(median(loaded) * 1000).toFixed(0)} ms; ` +
  `to an evicted model, page cache warm ${(median(warm) * 1000).toFixed(0)} ms (load ${(median(warmLoad) * 1000).toFixed(0)} ms), ` +
  `cold ${(median(cold) * 1000).toFixed(0)} ms (load ${(median(coldLoad) * 1000).toFixed(0)} ms); medians of ${opt.rounds}`);

// --- together
const s2 = await serve(['--memory-budget', `${Math.ceil((est.a + est.b) * 1.2)}M`]);
await complete(s2.port, 'a', 4);
await complete(s2.port, 'b', 4);
async function streams(models) {
  const t0 = now();
  const jobs = [];
  for (const m of models) for (let i = 0; i < opt.streams; i++) jobs.push(complete(s2.port, m, opt.tokens).then((x) => [m, x.tokens]));
  const done = await Promise.all(jobs);
  const s = now() - t0;
  const per = {};
  for (const [m, t] of done) per[m] = (per[m] ?? 0) + t / s;
  return per;
}
const alone = { a: [], b: [] }, both = { a: [], b: [], sum: [] };
for (let r = 0; r < opt.rounds; r++) {
  alone.a.push((await streams(['a'])).a);
  alone.b.push((await streams(['b'])).b);
  const x = await streams(['a', 'b']);
  both.a.push(x.a);
  both.b.push(x.b);
  both.sum.push(x.a + x.b);
}
s2.p.kill();
const f = (v) => median(v).toFixed(1);
console.log(`together (${opt.streams} streams of ${opt.tokens} tokens per model): a alone ${f(alone.a)} tok/s, b alone ${f(alone.b)} tok/s; ` +
  `both at once: a ${f(both.a)} + b ${f(both.b)} = ${f(both.sum)} tok/s ` +
  `(${(median(both.a) / median(alone.a)).toFixed(2)}x and ${(median(both.b) / median(alone.b)).toFixed(2)}x of alone; ` +
  `all: ${(median(both.sum) / ((median(alone.a) + median(alone.b)) / 2)).toFixed(2)}x of the mean alone); medians of ${opt.rounds}`);
rmSync(dir, { recursive: true, force: true });
