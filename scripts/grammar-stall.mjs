// Does one costly constrained request stall the streams beside it? Against a running
// `paddock serve`, in interleaved rounds: STREAMS plain streaming completions alone, then the
// same streams while constrained requests with SCHEMA (each made distinct by one extra enum
// value, so each compiles afresh) run back to back beside them. Prints the plain streams'
// inter-token gap p50/p99 per phase (medians over rounds) and their ratio.
// (--fresh 0: the same schema every time, compiled once: what the masks alone cost.)
// usage: node scripts/grammar-stall.mjs PORT SCHEMA.json [--streams 8] [--tokens 64] [--rounds 3]
//        [--fresh 1]
import { readFileSync } from 'node:fs';

const args = process.argv.slice(2);
if (args.length < 2) {
  console.error('usage: node scripts/grammar-stall.mjs PORT SCHEMA.json [--streams N] [--tokens N] [--rounds N]');
  process.exit(2);
}
const [port, schemaFile] = args;
const opt = { streams: 8, tokens: 64, rounds: 3, fresh: 1 };
for (let i = 2; i < args.length; i += 2) {
  const k = args[i].replace(/^--/, '');
  if (!(k in opt) || !/^[0-9]+$/.test(args[i + 1] ?? '')) {
    console.error(`grammar-stall: bad option '${args[i]} ${args[i + 1] ?? ''}'`);
    process.exit(2);
  }
  opt[k] = Number(args[i + 1]);
}
const schema = JSON.parse(readFileSync(schemaFile, 'utf8'));
if (!Array.isArray(schema.enum)) {
  console.error('grammar-stall: the schema must be {"enum": [...]} (a value is added per request)');
  process.exit(2);
}
const base = `http://127.0.0.1:${port}`;

async function stream(gaps) {
  const r = await fetch(`${base}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: opt.tokens, temperature: 0,
      ignore_eos: true, stream: true }),
  });
  if (r.status !== 200) throw new Error(`plain stream: ${r.status} ${await r.text()}`);
  const dec = new TextDecoder();
  let last = null;
  let buf = '';
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: {')) continue;
      const now = performance.now();
      if (last !== null) gaps.push(now - last);
      last = now;
    }
  }
}

let salt = 0;
async function constrained(stop) {
  let n = 0;
  while (!stop.done) {
    const s = opt.fresh ? { enum: [...schema.enum, `salt${process.pid}x${salt++}`] } : schema;
    const r = await fetch(`${base}/v1/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Pick one:', max_tokens: 16, temperature: 1,
        response_format: { type: 'json_schema', json_schema: { name: 'e', schema: s } } }),
    });
    const body = await r.json();
    if (r.status !== 200) throw new Error(`constrained: ${r.status} ${JSON.stringify(body)}`);
    n++;
  }
  return n;
}

function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
}
const median = (xs) => pct(xs, 0.5);

async function phase(beside) {
  const gaps = [];
  const stop = { done: false };
  const side = beside ? constrained(stop) : Promise.resolve(0);
  await Promise.all(Array.from({ length: opt.streams }, () => stream(gaps)));
  stop.done = true;
  const n = await side;
  return { p50: pct(gaps, 0.5), p99: pct(gaps, 0.99), gaps: gaps.length, constrained: n };
}

const res = { alone: [], beside: [] };
await phase(false);  // (warm-up)
for (let r = 0; r < opt.rounds; r++) {
  res.alone.push(await phase(false));
  res.beside.push(await phase(true));
}
console.log('| phase | gap p50 ms | gap p99 ms | gaps | constrained requests |');
console.log('|---|---|---|---|---|');
for (const k of ['alone', 'beside']) {
  const rs = res[k];
  console.log(`| ${k} | ${median(rs.map((x) => x.p50)).toFixed(1)} | ${median(rs.map((x) => x.p99)).toFixed(1)} | ${rs.reduce((a, x) => a + x.gaps, 0)} | ${rs.reduce((a, x) => a + x.constrained, 0)} |`);
}
const ratio = median(res.beside.map((x) => x.p99)) / median(res.alone.map((x) => x.p99));
console.log(`p99 ratio (beside / alone, medians of ${opt.rounds} interleaved rounds): ${ratio.toFixed(2)}`);
