// Paddock's web page: a chat over /v1/chat/completions (streamed) and a live dashboard over
// /metrics. No libraries: the page ships inside the paddock binary and works offline.
//
// Safety: model output and user text are only ever put into the page as text nodes
// (textContent, createTextNode); Markdown is parsed here into elements built one by one, links
// only for http(s) URLs. No innerHTML anywhere, and the server's Content-Security-Policy allows
// no inline script, so an answer holding <script> or <img onerror> stays inert.
'use strict';

const $ = (id) => document.getElementById(id);
const state = { model: null, history: [], controller: null, busy: false };

// ---- settings, kept in localStorage ---------------------------------------------------------
const SETTINGS = ['system', 'temperature', 'top_p', 'top_k', 'max_tokens', 'seed', 'schema', 'api_key'];
function loadSettings() {
  for (const id of SETTINGS) {
    const v = localStorage.getItem('paddock.' + id);
    if (v !== null) $(id).value = v;
  }
  $('json_mode').checked = localStorage.getItem('paddock.json_mode') === '1';
  $('schema_label').hidden = !$('json_mode').checked;
}
function saveSettings() {
  for (const id of SETTINGS) localStorage.setItem('paddock.' + id, $(id).value);
  localStorage.setItem('paddock.json_mode', $('json_mode').checked ? '1' : '0');
  $('schema_label').hidden = !$('json_mode').checked;
}
function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = $('api_key').value.trim();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

// ---- Markdown as elements -------------------------------------------------------------------
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
// Inline: `code`, **bold**, *italic* / _italic_ (not inside words), [text](http(s)://...).
// Everything else is text.
function inline(parent, text) {
  const re = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\s][^*\n]*\*)|((?<!\w)_[^_\n]+_(?!\w))|(\[[^\]\n]+\]\((https?:\/\/[^\s)]+)\))/;
  let rest = text;
  while (rest.length > 0) {
    const m = re.exec(rest);
    if (!m) { parent.appendChild(document.createTextNode(rest)); break; }
    if (m.index > 0) parent.appendChild(document.createTextNode(rest.slice(0, m.index)));
    const tok = m[0];
    if (m[1]) parent.appendChild(el('code', '', tok.slice(1, -1)));
    else if (m[2]) inline(parent.appendChild(el('strong')), tok.slice(2, -2));
    else if (m[3] || m[4]) inline(parent.appendChild(el('em')), tok.slice(1, -1));
    else {
      const a = el('a', '', tok.slice(1, tok.indexOf('](')));
      a.href = m[6];  // http(s) only (the expression above)
      a.rel = 'noopener noreferrer';
      a.target = '_blank';
      parent.appendChild(a);
    }
    rest = rest.slice(m.index + tok.length);
  }
}
// Blocks: fenced code (an unclosed fence while streaming is code too), headings, lists, quotes,
// paragraphs.
function renderMarkdown(container, text) {
  container.replaceChildren();
  const lines = text.split('\n');
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) inline(container.appendChild(el('p')), para.join('\n'));
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    const fence = /^\s*```\s*([\w+-]*)\s*$/.exec(line);
    if (fence) {
      flush();
      const body = [];
      for (i++; i < lines.length && !/^\s*```\s*$/.test(lines[i]); i++) body.push(lines[i]);
      i++;
      const pre = el('pre');
      if (fence[1]) pre.appendChild(el('span', 'lang', fence[1]));
      pre.appendChild(el('code', '', body.join('\n')));
      container.appendChild(pre);
      continue;
    }
    const h = /^(#{1,6})\s+(.*)$/.exec(line);
    if (h) { flush(); inline(container.appendChild(el('h' + Math.min(6, h[1].length + 2))), h[2]); i++; continue; }
    const li = /^\s*([-*+]|\d+[.)])\s+(.*)$/.exec(line);
    if (li) {
      flush();
      const ordered = /\d/.test(li[1]);
      const list = container.appendChild(el(ordered ? 'ol' : 'ul'));
      while (i < lines.length) {
        const m = /^\s*([-*+]|\d+[.)])\s+(.*)$/.exec(lines[i]);
        if (!m || /\d/.test(m[1]) !== ordered) break;
        inline(list.appendChild(el('li')), m[2]);
        i++;
      }
      continue;
    }
    if (/^>\s?/.test(line)) {
      flush();
      const q = [];
      while (i < lines.length && /^>\s?/.test(lines[i])) q.push(lines[i++].replace(/^>\s?/, ''));
      inline(container.appendChild(el('blockquote')), q.join('\n'));
      continue;
    }
    if (line.trim() === '') { flush(); i++; continue; }
    para.push(line);
    i++;
  }
  flush();
}

// ---- chat -----------------------------------------------------------------------------------
// Images for the next message (data: URLs), from the file picker or a paste.
const pending = [];
function showAttached() {
  $('attached').replaceChildren(...pending.map((u) => { const i = el('img', 'thumb'); i.src = u; i.alt = 'attached image'; return i; }));
}
function attach(file) {
  if (!file || !file.type.startsWith('image/')) return;
  const r = new FileReader();
  r.onload = () => { pending.push(r.result); showAttached(); };
  r.readAsDataURL(file);
}
// A message's content for the API: the text alone, or OpenAI content parts with its images.
function contentOf(text, images) {
  if (!images || images.length === 0) return text;
  return [{ type: 'text', text }, ...images.map((url) => ({ type: 'image_url', image_url: { url } }))];
}
function addMessage(role, text, images) {
  const div = el('div', 'msg ' + role);
  div.dataset.role = role;
  if (role === 'user') {
    div.textContent = text;
    for (const u of images || []) { const i = div.appendChild(el('img', 'thumb')); i.src = u; i.alt = 'image'; }
  }
  else {
    div.appendChild(el('div', 'reasoning')).hidden = true;
    div.appendChild(el('div', 'body'));
    div.appendChild(el('div', 'meta'));
    div.dataset.chunks = '0';
  }
  $('messages').appendChild(div);
  $('messages').scrollTop = $('messages').scrollHeight;
  return div;
}
function setBusy(busy) {
  state.busy = busy;
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  $('regen').disabled = busy || !state.history.some((m) => m.role === 'assistant');
}
function requestBody() {
  const messages = [];
  const system = $('system').value.trim();
  if (system) messages.push({ role: 'system', content: system });
  for (const m of state.history) messages.push({ role: m.role, content: contentOf(m.content, m.images) });
  const body = { ...(state.model ? { model: state.model } : {}), messages, stream: true, stream_options: { include_usage: true } };
  const num = (id, parse) => { const v = $(id).value.trim(); return v === '' ? undefined : parse(v); };
  body.temperature = num('temperature', parseFloat);
  body.top_p = num('top_p', parseFloat);
  body.top_k = num('top_k', (v) => parseInt(v, 10));
  body.max_tokens = num('max_tokens', (v) => parseInt(v, 10));
  body.seed = num('seed', (v) => parseInt(v, 10));
  if ($('json_mode').checked) {
    const s = $('schema').value.trim();
    if (s) body.response_format = { type: 'json_schema', json_schema: { name: 'ui', schema: JSON.parse(s) } };
    else body.response_format = { type: 'json_object' };
  }
  return body;
}
async function generate() {
  const div = addMessage('assistant', '');
  const bodyEl = div.querySelector('.body'), meta = div.querySelector('.meta'), reasonEl = div.querySelector('.reasoning');
  let text = '', reasoning = '', usage = null, finish = null, tFirst = 0, pending = false;
  const t0 = performance.now();
  const draw = () => {
    pending = false;
    renderMarkdown(bodyEl, text);
    reasonEl.hidden = reasoning === '';
    reasonEl.textContent = reasoning;
    $('messages').scrollTop = $('messages').scrollHeight;
  };
  state.controller = new AbortController();
  setBusy(true);
  let body;
  try {
    body = requestBody();
  } catch (e) {
    div.classList.add('error');
    bodyEl.textContent = 'The JSON Schema does not parse: ' + e.message;
    setBusy(false);
    return;
  }
  try {
    const res = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(body), signal: state.controller.signal });
    if (!res.ok) {
      let msg = res.status + ' ' + res.statusText;
      try { msg = (await res.json()).error?.message ?? msg; } catch { /* not JSON */ }
      throw new Error(msg);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split('\n')) {
          if (!line.startsWith('data: ')) continue;
          const data = line.slice(6);
          if (data === '[DONE]') continue;
          const j = JSON.parse(data);
          if (j.error) throw new Error(j.error.message);
          if (j.usage) usage = j.usage;
          const c = j.choices?.[0];
          if (!c) continue;
          const d = c.delta ?? {};
          if (d.content || d.reasoning_content) {
            if (!tFirst) tFirst = performance.now();
            text += d.content ?? '';
            reasoning += d.reasoning_content ?? '';
            div.dataset.chunks = String(Number(div.dataset.chunks) + 1);
            if (!pending) { pending = true; requestAnimationFrame(draw); }
          }
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
    }
    draw();
    const tEnd = performance.now();
    const parts = [];
    if (tFirst) parts.push('TTFT ' + Math.round(tFirst - t0) + ' ms');
    if (usage && tFirst && tEnd > tFirst && usage.completion_tokens > 1)
      parts.push(((usage.completion_tokens - 1) / ((tEnd - tFirst) / 1000)).toFixed(1) + ' tokens/s');
    if (usage) parts.push(usage.completion_tokens + ' tokens');
    if (finish) parts.push(finish);
    meta.textContent = parts.join(' · ');
    div.dataset.done = 'true';
    div.dataset.ttftMs = tFirst ? String(Math.round(tFirst - t0)) : '';
    state.history.push({ role: 'assistant', content: text });
  } catch (e) {
    draw();
    if (e.name === 'AbortError') {
      meta.textContent = 'stopped' + (text ? ' · ' + text.length + ' characters kept' : '');
      div.dataset.stopped = 'true';
      state.history.push({ role: 'assistant', content: text });
    } else {
      div.classList.add('error');
      meta.textContent = 'error: ' + e.message;
      div.dataset.error = e.message;
    }
  } finally {
    state.controller = null;
    setBusy(false);
    loadModels();  // (whether the model is loaded now)
  }
}
function send(ev) {
  ev?.preventDefault();
  if (state.busy) return;
  const text = $('input').value;
  if (!text.trim() && pending.length === 0) return;
  $('input').value = '';
  const images = pending.splice(0);
  showAttached();
  state.history.push({ role: 'user', content: text, images });
  addMessage('user', text, images);
  generate();
}
function regenerate() {
  if (state.busy) return;
  const last = state.history.length - 1;
  if (last < 0 || state.history[last].role !== 'assistant') return;
  state.history.pop();
  const msgs = $('messages').querySelectorAll('.msg.assistant');
  msgs[msgs.length - 1]?.remove();
  generate();
}

// ---- dashboard ------------------------------------------------------------------------------
// Prometheus text: name{labels} value -> samples[name] = [{labels, value}].
function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const kv of (m[3] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[kv[1]] = kv[2];
    (out[m[1]] ??= []).push({ labels, value: parseFloat(m[4]) });
  }
  return out;
}
const sum = (s, name, pred = () => true) => (s[name] ?? []).filter((x) => pred(x.labels)).reduce((a, x) => a + x.value, 0);
// Cumulative histogram buckets -> {le: count}.
function buckets(s, name) {
  const b = new Map();
  for (const x of s[name + '_bucket'] ?? []) {
    const le = x.labels.le === '+Inf' ? Infinity : parseFloat(x.labels.le);
    b.set(le, (b.get(le) ?? 0) + x.value);
  }
  return b;
}
// The q-quantile of the observations between two bucket snapshots (linear within a bucket).
function quantile(now, before, q) {
  const les = [...now.keys()].sort((a, b) => a - b);
  const counts = les.map((le) => now.get(le) - (before?.get(le) ?? 0));
  const total = counts[counts.length - 1] ?? 0;
  if (!(total > 0)) return null;
  const want = q * total;
  let prevLe = 0, prevCount = 0;
  for (let i = 0; i < les.length; i++) {
    if (counts[i] >= want) {
      if (les[i] === Infinity) return prevLe;
      const span = counts[i] - prevCount;
      return prevLe + (les[i] - prevLe) * (span > 0 ? (want - prevCount) / span : 1);
    }
    prevLe = les[i];
    prevCount = counts[i];
  }
  return prevLe;
}
class Chart {
  constructor(canvas, series) {
    this.canvas = canvas;
    this.series = series;  // [{name, color}]
    this.data = series.map(() => []);
    this.points = 0;
  }
  push(values) {
    values.forEach((v, i) => { this.data[i].push(v); if (this.data[i].length > 120) this.data[i].shift(); });
    this.points++;
    this.canvas.dataset.points = String(this.points);
    this.canvas.dataset.last = JSON.stringify(values);
    this.draw();
  }
  draw() {
    const c = this.canvas, g = c.getContext('2d');
    const w = c.width, h = c.height, pad = 28;
    g.clearRect(0, 0, w, h);
    let max = 0;
    for (const d of this.data) for (const v of d) if (Number.isFinite(v)) max = Math.max(max, v);
    max = max > 0 ? max * 1.1 : 1;
    g.strokeStyle = '#e3e3df';
    g.fillStyle = '#6b7280';
    g.font = '11px system-ui';
    for (let k = 0; k <= 4; k++) {
      const y = h - pad / 2 - (h - pad) * k / 4;
      g.beginPath(); g.moveTo(pad + 8, y); g.lineTo(w, y); g.stroke();
      g.fillText((max * k / 4).toPrecision(3).replace(/\.?0+$/, ''), 0, y + 4);
    }
    this.data.forEach((d, i) => {
      g.strokeStyle = this.series[i].color;
      g.lineWidth = 2;
      g.beginPath();
      d.forEach((v, j) => {
        const x = pad + 8 + (w - pad - 8) * (j + 120 - d.length) / 119;
        const y = h - pad / 2 - (h - pad) * (Number.isFinite(v) ? v : 0) / max;
        j === 0 ? g.moveTo(x, y) : g.lineTo(x, y);
      });
      g.stroke();
      g.fillStyle = this.series[i].color;
      g.fillText(this.series[i].name, w - 150 + 75 * i, 12);
    });
  }
}
const charts = {};
const history = [];  // recent metric snapshots (for rates and windowed percentiles)
let dashTimer = null;
const fmt = (v, digits = 1) => (v === null || v === undefined || !Number.isFinite(v) ? '–' : v.toFixed(digits));
function bytes(n) {
  const u = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + ' ' + u[i];
}
async function pollMetrics() {
  let s;
  try {
    const res = await fetch('/metrics', { headers: headers() });
    if (!res.ok) throw new Error(res.status + ' ' + res.statusText);
    s = parseMetrics(await res.text());
    $('status').textContent = 'live';
  } catch (e) {
    $('status').textContent = 'metrics: ' + e.message;
    return;
  }
  const now = { t: performance.now() / 1000, s, ttft: buckets(s, 'vllm:time_to_first_token_seconds'), itl: buckets(s, 'vllm:inter_token_latency_seconds') };
  history.push(now);
  while (history.length > 31) history.shift();
  const prev = history.length > 1 ? history[history.length - 2] : null;
  const old = history[0];  // ~30 s back: the window of the percentiles
  const rate = (name) => (prev ? (sum(s, name) - sum(prev.s, name)) / (now.t - prev.t) : null);
  const gen = rate('vllm:generation_tokens_total'), prompt = rate('vllm:prompt_tokens_total');
  const running = sum(s, 'vllm:num_requests_running'), waiting = sum(s, 'vllm:num_requests_waiting');
  const kv = 100 * sum(s, 'vllm:kv_cache_usage_perc');
  const win = old !== now ? old : null;
  const ttft50 = quantile(now.ttft, win?.ttft, 0.5), ttft95 = quantile(now.ttft, win?.ttft, 0.95);
  const itl50 = quantile(now.itl, win?.itl, 0.5), itl95 = quantile(now.itl, win?.itl, 0.95);
  const ms = (v) => (v === null ? null : v * 1000);
  $('m-gen-rate').textContent = fmt(gen);
  $('m-prompt-rate').textContent = fmt(prompt);
  $('m-running').textContent = String(running);
  $('m-waiting').textContent = String(waiting);
  $('m-kv').textContent = fmt(kv) + ' %';
  $('m-ttft').textContent = fmt(ms(ttft50), 0) + ' / ' + fmt(ms(ttft95), 0) + ' ms';
  $('m-itl').textContent = fmt(ms(itl50), 1) + ' / ' + fmt(ms(itl95), 1) + ' ms';
  const queries = sum(s, 'vllm:prefix_cache_queries_total'), hits = sum(s, 'vllm:prefix_cache_hits_total');
  $('m-prefix').textContent = queries > 0 ? fmt(100 * hits / queries) + ' %' : '–';
  $('m-preempt').textContent = String(sum(s, 'vllm:num_preemptions_total'));
  $('m-429').textContent = String(sum(s, 'paddock_http_responses_total', (l) => l.code === '429'));
  if (prev) {
    charts.tokens.push([gen, prompt]);
    charts.requests.push([running, waiting]);
    charts.kv.push([kv]);
    charts.latency.push([ms(ttft95), ms(itl95)]);
  }
  // Memory per loaded model (one bar each: weights, KV in use, KV free, scratch), against the
  // budget of all of them when the server has several.
  const byModel = new Map();
  for (const x of s.paddock_memory_bytes ?? []) {
    const m = byModel.get(x.labels.model_name) ?? {};
    m[x.labels.kind] = x.value;
    byModel.set(x.labels.model_name, m);
  }
  const budget = sum(s, 'paddock_memory_budget_bytes'), committed = sum(s, 'paddock_memory_committed_bytes');
  $('budget').textContent = budget > 0 ? 'In use: ' + bytes(committed) + ' of a ' + bytes(budget) + ' budget; ' +
    byModel.size + ' of ' + (s.paddock_model_loaded ?? []).length + ' models loaded' : '';
  // The KV disk tier (--kv-disk), when a loaded model has one.
  $('kvdisk').textContent = s.paddock_kv_disk_budget_bytes
    ? 'KV disk tier: ' + sum(s, 'paddock_kv_disk_hits_total') + ' blocks read back (' +
      bytes(sum(s, 'paddock_kv_disk_read_bytes_total')) + ' in ' + fmt(sum(s, 'paddock_kv_disk_read_seconds_total'), 2) +
      ' s), ' + sum(s, 'paddock_kv_disk_misses_total') + ' misses, ' + sum(s, 'paddock_kv_disk_blocks_written_total') +
      ' written (' + bytes(sum(s, 'paddock_kv_disk_written_bytes_total')) + '), ' +
      sum(s, 'paddock_kv_disk_dropped_writes_total') + ' dropped, ' + sum(s, 'paddock_kv_disk_corrupt_total') +
      ' corrupt; ' + bytes(sum(s, 'paddock_kv_disk_bytes')) + ' of ' + bytes(sum(s, 'paddock_kv_disk_budget_bytes')) +
      (sum(s, 'paddock_kv_disk_writes_stopped') > 0 ? '; writes stopped' : '')
    : '';
  const parts = [['weights', '#2f6f5e'], ['kv_used', '#d08a2f'], ['kv_free', '#f0d7ad'], ['scratch', '#8a8fa0']];
  const box = $('memory');
  box.replaceChildren();
  const scale = Math.max(budget, ...[...byModel.values()].map((m) => (m.weights ?? 0) + (m.kv_pool ?? 0) + (m.scratch ?? 0)));
  for (const [name, mem] of byModel) {
    mem.kv_free = Math.max(0, (mem.kv_pool ?? 0) - (mem.kv_used ?? 0));
    const total = parts.reduce((a, [k]) => a + (mem[k] ?? 0), 0);
    const row = box.appendChild(el('div', 'model-memory'));
    row.dataset.model = name;
    row.appendChild(el('div', 'model-name', name + ': ' + bytes(total)));
    const bar = row.appendChild(el('div', 'bar'));
    bar.style.width = (budget > 0 && scale > 0 ? Math.max(2, 100 * total / scale) : 100) + '%';
    const legend = row.appendChild(el('div', 'legend'));
    for (const [k, color] of parts) {
      const seg = bar.appendChild(el('span'));
      seg.style.width = (total > 0 ? 100 * (mem[k] ?? 0) / total : 0) + '%';
      seg.style.background = color;
      const item = legend.appendChild(el('span', '', k.replace('_', ' ') + ': ' + bytes(mem[k] ?? 0)));
      const sw = el('span', 'swatch');
      sw.style.background = color;
      item.prepend(sw);
    }
  }
}
function showView(view) {
  for (const b of document.querySelectorAll('.tab')) b.classList.toggle('active', b.dataset.view === view);
  $('view-chat').hidden = view !== 'chat';
  $('view-dash').hidden = view !== 'dash';
  if (view === 'dash' && !dashTimer) {
    pollMetrics();
    dashTimer = setInterval(pollMetrics, 1000);
  } else if (view !== 'dash' && dashTimer) {
    clearInterval(dashTimer);
    dashTimer = null;
  }
  location.hash = view;
}

async function init() {
  loadSettings();
  for (const id of [...SETTINGS, 'json_mode']) $(id).addEventListener('change', saveSettings);
  $('composer').addEventListener('submit', send);
  $('image').addEventListener('change', (e) => { for (const f of e.target.files) attach(f); e.target.value = ''; });
  $('input').addEventListener('paste', (e) => {
    for (const item of e.clipboardData?.items || []) if (item.kind === 'file') attach(item.getAsFile());
  });
  $('input').addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.shiftKey) send(e); });
  $('stop').addEventListener('click', () => state.controller?.abort());
  $('regen').addEventListener('click', regenerate);
  $('clear').addEventListener('click', () => { if (!state.busy) { state.history = []; $('messages').replaceChildren(); setBusy(false); } });
  for (const b of document.querySelectorAll('.tab')) b.addEventListener('click', () => showView(b.dataset.view));
  charts.tokens = new Chart($('c-tokens'), [{ name: 'decode', color: '#2f6f5e' }, { name: 'prompt', color: '#d08a2f' }]);
  charts.requests = new Chart($('c-requests'), [{ name: 'running', color: '#2f6f5e' }, { name: 'waiting', color: '#a4461d' }]);
  charts.kv = new Chart($('c-kv'), [{ name: 'KV %', color: '#2f6f5e' }]);
  charts.latency = new Chart($('c-latency'), [{ name: 'TTFT', color: '#2f6f5e' }, { name: 'ITL', color: '#d08a2f' }]);
  showView(location.hash === '#dash' ? 'dash' : 'chat');
  $('model').addEventListener('change', () => {
    state.model = $('model').value;
    localStorage.setItem('paddock.model', state.model);
    showModelStatus();
  });
  await loadModels();
  document.body.dataset.ready = 'true';
}

// The model picker: every served model and adapter (/v1/models); with several models, whether
// each is loaded (a request for an unloaded one loads it first).
let models = [];
function showModelStatus() {
  const m = models.find((x) => x.id === state.model);
  $('model-status').textContent = m?.status ? m.status.value : '';
}
async function loadModels() {
  const pick = $('model');
  try {
    const res = await fetch('/v1/models', { headers: headers() });
    const j = await res.json();
    models = j.data ?? [];
    pick.replaceChildren();
    for (const m of models) {
      const o = pick.appendChild(el('option', '', m.id));
      o.value = m.id;
      if (m.parent) o.textContent = m.id + ' (adapter on ' + m.parent + ')';
    }
    if (models.length === 0) pick.appendChild(el('option', '', j.error?.message ?? 'no model'));
    const saved = state.model ?? localStorage.getItem('paddock.model');
    state.model = models.some((m) => m.id === saved) ? saved : (models[0]?.id ?? null);
    if (state.model) pick.value = state.model;
    showModelStatus();
  } catch (e) {
    pick.replaceChildren(el('option', '', 'server unreachable'));
  }
}
init();
