// Replicas of stories260K behind a real HAProxy (scripts/cluster, deploy/haproxy) on loopback:
//   affinity   prefix-cache hit rate over the replicas with prefix affinity vs round-robin, on a
//              workload sharing four long system prompts; every greedy answer equal to the same
//              request's answer from one server
//   sigterm    one replica drains under load: no request fails
//   sigkill    one replica dies under load: only requests it was serving fail, and the balancer
//              stops sending to it within the health-check interval
//   fullqueue  a replica with a full queue: its refusals are retried elsewhere, no 429 while
//              another replica has room; 429 once every one is full
//   prometheus a real Prometheus scraping two replicas with deploy/prometheus/rules.yml: its
//              counters equal this load generator's own counts, every recording rule evaluates
// usage: node cluster.mjs ROOT PADDOCK_BIN MODELS_DIR [PART ...]  (PADDOCK_MODELS overrides MODELS_DIR)
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const [root, bin, modelsDir, ...partsArg] = process.argv.slice(2);
const model = path.join(process.env.PADDOCK_MODELS || modelsDir, 'stories260K.gguf');
const parts = partsArg.length ? partsArg : ['affinity', 'sigterm', 'sigkill', 'fullqueue', 'prometheus'];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'paddock-cluster-test-'));
let pass = 0;
let fail = 0;
const check = (name, ok, detail = '') => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} cluster: ${name}${ok ? '' : ' ' + detail}`);
  ok ? pass++ : fail++;
};
const inflight = new Set();  // requests whose answer started and has not ended
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.now() / 1000;

async function freeBase(n) {  // n consecutive free ports
  for (;;) {
    const base = 20000 + Math.floor(Math.random() * 30000);
    let ok = true;
    for (let p = base; p < base + n && ok; p++) {
      ok = await new Promise((res) => {
        const s = net.createServer().once('error', () => res(false)).once('listening', () => s.close(() => res(true)));
        s.listen(p, '127.0.0.1');
      });
    }
    if (ok) return base;
  }
}

const env = (dir) => ({ ...process.env, PADDOCK_CLUSTER_DIR: dir, BUILD: path.dirname(bin) });
async function startCluster(name, n, { balance = 'affinity', serve = [] } = {}) {
  const dir = path.join(tmp, name);
  const port = await freeBase(2 * n + 1);
  execFileSync(path.join(root, 'scripts/cluster'), ['start', model, String(n), '--port', String(port), '--balance', balance, '--', ...serve],
    { env: env(dir), stdio: ['ignore', 'inherit', 'inherit'] });
  const pid = (i) => Number(fs.readFileSync(path.join(dir, `replica${i}.pid`), 'utf8'));
  return { dir, port, n, pid, replicaPort: (i) => port + i };
}
function stopCluster(c) {
  execFileSync(path.join(root, 'scripts/cluster'), ['stop'], { env: env(c.dir), stdio: 'ignore' });
}
const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function metric(port, name) {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  let sum = 0;
  for (const m of text.matchAll(new RegExp(`^${name}(\\{[^}]*\\})? ([0-9.e+-]+)$`, 'gm'))) sum += Number(m[2]);
  return sum;
}

// One chat request; streaming: reads the events, returns text, replica, timing, success.
async function chat(port, body, { stream = false } = {}) {
  const t0 = now();
  const r = { ok: false, status: 0, text: '', replica: null, t0, ttft: null, tokens: 0 };
  try {
    const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ ...body, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }),
    });
    r.status = res.status;
    r.replica = res.headers.get('x-paddock-replica');
    r.headersAt = now();
    inflight.add(r);
    if (!stream) {
      const j = await res.json();
      r.ok = res.status === 200 && !!j.choices;
      r.text = j.choices?.[0]?.message?.content ?? '';
      r.tokens = j.usage?.completion_tokens ?? 0;
      r.error = j.error;
    } else {
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      let done = false;
      for (;;) {
        const { value, done: end } = await reader.read();
        if (end) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (!ev.startsWith('data: ')) continue;
          const data = ev.slice(6);
          if (data === '[DONE]') {
            done = true;
            continue;
          }
          const j = JSON.parse(data);
          const piece = j.choices?.[0]?.delta?.content;
          if (piece) {
            if (r.ttft === null) r.ttft = now() - t0;
            r.text += piece;
          }
          if (j.usage) r.tokens = j.usage.completion_tokens;
        }
      }
      r.ok = res.status === 200 && done;
    }
  } catch (e) {
    r.error = String(e);
  }
  r.t1 = now();
  inflight.delete(r);
  return r;
}

// One non-streaming chat request on a connection of its own (no keep-alive reuse, so a
// connection the balancer closes after an answer cannot race the next request).
function chatOnce(port, body) {
  return new Promise((resolve) => {
    const data = JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST', agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, replica: res.headers['x-paddock-replica'] ?? null, body: text }));
    });
    req.on('error', (e) => resolve({ status: 0, error: String(e) }));
    req.end(data);
  });
}

async function pool(items, concurrency, fn) {
  const out = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  }));
  return out;
}

// Four long system prompts (different stories), six questions each.
const names = ['Lily', 'Tom', 'Sue', 'Max'];
const places = ['the park', 'the forest', 'the sea', 'the hill'];
const systems = names.map((n, i) => `You are a storyteller. ` + Array.from({ length: 24 }, (_, k) =>
  `${n} went to ${places[i]} on day ${k} and saw a ${['dog', 'cat', 'bird', 'ball'][k % 4]}.`).join(' '));
const questions = ['Tell me about a dog.', 'What did she find?', 'Who went to the park?', 'Tell me a short story.',
  'What happened next?', 'Why was he sad?'];
const workload = questions.flatMap((q) => systems.map((s) => ({
  messages: [{ role: 'system', content: s }, { role: 'user', content: q }], max_tokens: 12, temperature: 0 })));

async function affinity() {
  // The reference: one server, one request at a time.
  const single = await startCluster('single', 1);
  const reference = await pool(workload, 1, (b) => chat(single.port, b));
  stopCluster(single);
  check('single server answers every request', reference.every((r) => r.ok));
  const rates = {};
  for (const balance of ['affinity', 'roundrobin']) {
    const c = await startCluster(balance, 3, { balance });
    const answers = await pool(workload, 4, (b) => chat(c.port, b));
    let hits = 0;
    let queries = 0;
    const per = [];
    for (let i = 1; i <= 3; i++) {
      const h = await metric(c.replicaPort(i), 'vllm:prefix_cache_hits_total');
      const q = await metric(c.replicaPort(i), 'vllm:prefix_cache_queries_total');
      hits += h;
      queries += q;
      per.push(`${h}/${q}`);
    }
    stopCluster(c);
    rates[balance] = hits / queries;
    const spread = new Set(answers.map((a) => a.replica)).size;
    const where = systems.map((_, si) => [...new Set(answers.filter((a, i) => i % 4 === si).map((a) => a.replica))].join('+'));
    console.log(`cluster: ${balance}: replicas per system prompt: ${where.join(', ')}`);
    console.log(`cluster: ${balance}: prefix-cache hits ${hits} of ${queries} prompt tokens = ${(100 * rates[balance]).toFixed(1)}% (per replica ${per.join(', ')}), ${spread} replicas used`);
    check(`${balance}: every answer 200`, answers.every((a) => a.ok), JSON.stringify(answers.filter((a) => !a.ok).slice(0, 2)));
    const same = answers.filter((a, i) => a.text === reference[i].text).length;
    check(`${balance}: every greedy answer equals the single server's`, same === workload.length, `${same}/${workload.length}`);
  }
  check('affinity keeps more of the prefix cache than round-robin (by 10 points or more)',
    rates.affinity > rates.roundrobin + 0.10, JSON.stringify(rates));
}

function longLoad(port, n, concurrency, maxTokens) {
  const items = Array.from({ length: n }, (_, i) => ({
    messages: [{ role: 'system', content: systems[i % 4] }, { role: 'user', content: questions[i % 6] }],
    max_tokens: maxTokens, temperature: 0.8, seed: i, ignore_eos: true }));
  return pool(items, concurrency, (b) => chat(port, b, { stream: true }));
}

// Until `n` answers are streaming (at most 10 s): the load is under way, whatever the machine's
// speed (a fixed wait could outlast a fast machine's whole load).
async function streaming(n) {
  for (let i = 0; i < 500 && inflight.size < n; i++) await sleep(20);
}

// The replica (1-based) serving the most requests right now.
function busiest() {
  const count = {};
  for (const r of inflight) count[r.replica] = (count[r.replica] ?? 0) + 1;
  const best = Object.entries(count).sort((a, b) => b[1] - a[1])[0];
  return best ? Number(best[0].replace('replica', '')) : 1;
}

async function sigterm() {
  const c = await startCluster('sigterm', 3);
  const loadP = longLoad(c.port, 36, 6, 150);
  await streaming(6);
  const victim = busiest();
  const tKill = now();
  process.kill(c.pid(victim), 'SIGTERM');
  const rs = await loadP;
  const failed = rs.filter((r) => !r.ok);
  check('SIGTERM to one replica under load: no request fails', failed.length === 0, JSON.stringify(failed.slice(0, 3)));
  const onIt = rs.filter((r) => r.replica === `replica${victim}`);
  const finishedAfter = onIt.filter((r) => r.t1 > tKill).length;
  console.log(`cluster: sigterm: ${onIt.length} requests on the draining replica, ${finishedAfter} of them finished after the signal`);
  check('SIGTERM: requests in flight on the draining replica finished there', finishedAfter > 0);
  const late = rs.filter((r) => r.t0 > tKill + 5 && r.replica === `replica${victim}`).length;
  check('SIGTERM: no request started 5 s after the signal went to the draining replica', late === 0, `${late}`);
  for (let i = 0; i < 100 && alive(c.pid(victim)); i++) await sleep(100);
  check('SIGTERM: the drained replica exited', !alive(c.pid(victim)));
  stopCluster(c);
}

async function sigkill() {
  const c = await startCluster('sigkill', 3);
  const loadP = longLoad(c.port, 40, 6, 200);
  await streaming(6);
  const victim = busiest();
  const tKill = now();
  process.kill(c.pid(victim), 'SIGKILL');
  const rs = await loadP;
  const failed = rs.filter((r) => !r.ok);
  const name = `replica${victim}`;
  const onVictim = rs.filter((r) => r.replica === name && r.headersAt !== undefined && r.headersAt < tKill && r.t1 >= tKill);
  console.log(`cluster: sigkill: ${name} killed with ${onVictim.length} requests in flight on it; ${failed.length} failed, ${rs.length - failed.length} completed`);
  check('SIGKILL: the killed replica was serving requests', onVictim.length > 0);
  check('SIGKILL: only the requests the killed replica was serving fail',
    failed.every((r) => r.replica === name && r.t0 < tKill), JSON.stringify(failed.map((r) => [r.replica, r.status, r.t0 - tKill])));
  check('SIGKILL: no more failures than requests in flight on it', failed.length <= onVictim.length, `${failed.length} > ${onVictim.length}`);
  // The load may end before the checks have run (a fast machine): a second load, started once
  // the checks (fall 2 x inter 1 s) have had 3 s, always has requests to look at.
  const wait = tKill + 3.5 - now();
  if (wait > 0) await sleep(1000 * wait);
  const more = await longLoad(c.port, 12, 6, 16);
  const after = [...rs, ...more].filter((r) => r.t0 > tKill + 3);
  check('SIGKILL: after the health checks (3 s) nothing goes to the dead replica',
    after.length >= more.length && after.every((r) => r.ok && r.replica !== name),
    JSON.stringify(after.filter((r) => !r.ok || r.replica === name).map((r) => [r.replica, r.status]).slice(0, 3)));
  stopCluster(c);
}

async function fullqueue() {
  // Each replica: one running and one waiting request at most. Six long requests with one
  // prefix, arriving 400 ms apart, fit in the cluster but not in the replica they hash to.
  const c = await startCluster('fullqueue', 3, { serve: ['--max-running', '1', '--max-queue', '1'] });
  const body = (i) => ({ messages: [{ role: 'system', content: systems[0] }, { role: 'user', content: questions[i % 6] }],
    max_tokens: 1200, temperature: 0.8, seed: i, ignore_eos: true });
  const staggered = (n, gapMs) => Promise.all(Array.from({ length: n }, (_, i) => sleep(i * gapMs).then(() => chatOnce(c.port, body(i)))));
  const six = await staggered(6, 400);
  const refused = await Promise.all([1, 2, 3].map((i) => metric(c.replicaPort(i), 'paddock_requests_rejected_total')));
  console.log(`cluster: fullqueue: 6 requests with one prefix -> ${JSON.stringify(six.map((r) => r.replica))}; refusals per replica ${refused}`);
  check('full queue: while another replica has room the client sees no 429 (6 requests, room for 6)', six.every((r) => r.status === 200),
    JSON.stringify(six.map((r) => r.status)));
  const twelve = await staggered(12, 100);
  const st = twelve.map((r) => r.status);
  const refused2 = await Promise.all([1, 2, 3].map((i) => metric(c.replicaPort(i), 'paddock_requests_rejected_total')));
  console.log(`cluster: fullqueue: 12 requests -> ${JSON.stringify(st)}; refusals per replica ${refused2} (each retried by the balancer)`);
  check('full queue: every replica full -> 429 (never the internal 503)', st.includes(429) && st.every((s) => s === 200 || s === 429),
    JSON.stringify(st) + ' ' + JSON.stringify(twelve.filter((r) => r.status !== 200 && r.status !== 429).map((r) => r.error)));
  stopCluster(c);
}

async function prometheus() {
  const c = await startCluster('prom', 2);
  const promPort = await freeBase(1);
  const cfg = path.join(c.dir, 'prometheus.yml');
  fs.writeFileSync(cfg, `global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["${path.join(root, 'deploy/prometheus/rules.yml')}", "${path.join(root, 'deploy/prometheus/alerts.yml')}"]
scrape_configs:
  - job_name: paddock
    static_configs: [{targets: ["127.0.0.1:${c.replicaPort(1)}", "127.0.0.1:${c.replicaPort(2)}"]}]
`);
  const prom = spawn('prometheus', [`--config.file=${cfg}`, `--storage.tsdb.path=${path.join(c.dir, 'tsdb')}`,
    `--web.listen-address=127.0.0.1:${promPort}`], { stdio: ['ignore', 'ignore', fs.openSync(path.join(c.dir, 'prometheus.log'), 'w')] });
  const query = async (q) => {
    const j = await (await fetch(`http://127.0.0.1:${promPort}/api/v1/query?query=${encodeURIComponent(q)}`)).json();
    return j.data?.result?.length ? Number(j.data.result[0].value[1]) : NaN;
  };
  try {
    for (let i = 0; i < 300; i++) {
      try {
        if ((await query('up')) === 1) break;
      } catch {}
      await sleep(100);
    }
    // A fixed load: 24 streamed chats from 4 clients. Then the events, each waited for (no
    // clock in any check): Prometheus' counters reaching exactly what the client counted, and
    // each recording rule producing a value.
    const items = Array.from({ length: 24 }, (_, i) => ({
      messages: [{ role: 'system', content: systems[i % 4] }, { role: 'user', content: questions[i % 6] }],
      max_tokens: 32, temperature: 0.8, seed: i }));
    const done = await pool(items, 4, (b) => chat(c.port, b, { stream: true }));
    const completed = done.filter((r) => r.ok).length;
    const tokens = done.reduce((sum, r) => sum + r.tokens, 0);
    check('prometheus: the load completed', completed === items.length, `${completed}/${items.length}`);
    const until = async (q, ok, tries = 600) => {  // polls q until ok(value): the event itself
      let v = NaN;
      for (let i = 0; i < tries; i++) {
        v = await query(q);
        if (ok(v)) break;
        await sleep(100);
      }
      return v;
    };
    const served = await until('sum(vllm:request_success_total)', (v) => v === completed);
    check('prometheus: requests counted over both replicas == requests the client completed', served === completed, `${served} vs ${completed}`);
    const promTokens = await until('sum(vllm:generation_tokens_total)', (v) => v === tokens);
    check('prometheus: generated tokens over both replicas == the client\'s usage total', promTokens === tokens, `${promTokens} vs ${tokens}`);
    const firsts = await until('sum(vllm:time_to_first_token_seconds_count)', (v) => v === completed);
    check('prometheus: one TTFT observation per request', firsts === completed, `${firsts} vs ${completed}`);
    const promTps = await until('cluster:paddock_generation_tokens:rate1m', (v) => v > 0);
    const promTtft = await until('cluster:paddock_ttft_seconds:p50_1m', (v) => v > 0);
    console.log(`cluster: prometheus: generation ${promTps.toFixed(1)} tok/s (rule); TTFT p50 ${promTtft.toFixed(3)} s (rule); ${tokens} tokens in ${completed} requests`);
    check('prometheus: the throughput rule has a positive value', Number.isFinite(promTps) && promTps > 0, String(promTps));
    check('prometheus: the TTFT rule has a positive value', Number.isFinite(promTtft) && promTtft > 0, String(promTtft));
    const r429 = await query('cluster:paddock_http_429:rate1m');
    check('prometheus: the 429 rule is 0 (no refusals)', r429 === 0, String(r429));
    const hit = await until('cluster:paddock_prefix_cache_hit:ratio5m', (v) => v > 0);
    check('prometheus: the prefix hit-rate rule is a ratio', hit > 0 && hit <= 1, String(hit));
    const kv = await until('count(instance:paddock_kv_cache_usage:ratio)', (v) => v === 2);
    check('prometheus: per-replica series for both replicas', kv === 2, String(kv));
  } finally {
    prom.kill('SIGTERM');
    stopCluster(c);
  }
}

const all = { affinity, sigterm, sigkill, fullqueue, prometheus };
try {
  for (const p of parts) {
    if (!all[p]) throw new Error(`unknown part '${p}'`);
    await all[p]();
  }
} catch (e) {
  check(`no exception (${e.message})`, false);
}
fs.rmSync(tmp, { recursive: true, force: true });
console.log(`cluster: ${pass} passed, ${fail} failed`);
process.exit(fail ? 1 : 0);
