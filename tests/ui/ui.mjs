// The web page of `paddock serve`, driven in headless Chromium (Debian's chromium) through
// puppeteer-core: a chat streams tokens, stops, regenerates; an answer holding HTML is shown as
// text (nothing runs, no element is made of it); the dashboard's charts move while the load
// generator runs. Screenshots of the chat and the dashboard go to OUTDIR.
// usage: node ui.mjs PORT LOADGEN OUTDIR
import puppeteer from 'puppeteer-core';
import { spawn } from 'node:child_process';

const [port, loadgen, outdir] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ui: ${name}${ok ? '' : ' ' + detail}`);
  if (!ok) failures++;
}
async function metric(name) {
  const text = await (await fetch(base + '/metrics')).text();
  return text.split('\n').filter((l) => l.startsWith(name)).reduce((a, l) => a + parseFloat(l.split(' ').pop()), 0);
}

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  defaultViewport: { width: 1280, height: 800 },
});
const timer = setTimeout(() => { console.log('FAIL ui: timed out'); process.exit(1); }, 150000);
try {
  const page = await browser.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  page.on('requestfailed', (r) => { if (!r.failure()?.errorText.includes('ABORTED')) problems.push('request failed: ' + r.url()); });
  page.on('request', (r) => { if (!r.url().startsWith(base)) problems.push('request off the server: ' + r.url()); });
  await page.goto(base + '/', { waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="true"]', { timeout: 10000 });
  const model = await page.$eval('#model', (e) => e.textContent);
  check('the page loads and names the model', model === 'slow', model);

  const setField = async (id, value) => {
    await page.$eval('#' + id, (e, v) => { e.value = v; e.dispatchEvent(new Event('change')); }, value);
  };
  const assistants = () => page.$$eval('.msg.assistant', (l) => l.length);
  const send = async (text) => {
    await page.click('#input');
    await page.keyboard.type(text);
    await page.keyboard.press('Enter');
  };

  // 1. Streaming: the answer grows chunk by chunk while it is being written.
  await setField('max_tokens', '48');
  await setField('temperature', '0.8');
  await send('Tell me a story about a <b>cat</b>.');
  await page.waitForFunction(() => {
    const m = [...document.querySelectorAll('.msg.assistant')].pop();
    return m && Number(m.dataset.chunks) >= 3 && m.dataset.done !== 'true';
  }, { timeout: 20000, polling: 'mutation' });
  check('tokens stream into the answer before it is done', true);
  await page.waitForSelector('.msg.assistant[data-done="true"]', { timeout: 30000 });
  const first = await page.$eval('.msg.assistant', (m) => ({ text: m.querySelector('.body').textContent, meta: m.querySelector('.meta').textContent, chunks: Number(m.dataset.chunks) }));
  check('the answer is shown with TTFT and tokens/s', first.text.length > 0 && /TTFT \d+ ms/.test(first.meta) && /tokens\/s/.test(first.meta), JSON.stringify(first));
  const userHtml = await page.$eval('.msg.user', (m) => ({ text: m.textContent, elements: m.querySelectorAll('*').length }));
  check('a user message holding HTML is text', userHtml.text.includes('<b>cat</b>') && userHtml.elements === 0, JSON.stringify(userHtml));

  // 2. Stop: a long generation is cut; the server cancels the request.
  const cancelled = await metric('paddock_requests_cancelled_total');
  await setField('max_tokens', '2000');
  await send('Go on.');
  await page.waitForFunction(() => Number([...document.querySelectorAll('.msg.assistant')].pop()?.dataset.chunks) >= 2, { timeout: 20000 });
  await page.click('#stop');
  await page.waitForSelector('.msg.assistant[data-stopped="true"]', { timeout: 10000 });
  let after = cancelled;
  for (let i = 0; i < 50 && after === cancelled; i++) {
    await new Promise((r) => setTimeout(r, 100));
    after = await metric('paddock_requests_cancelled_total');
  }
  const stopped = await page.$eval('.msg.assistant[data-stopped="true"] .meta', (e) => e.textContent);
  check('stop ends the generation and the server cancels it', after === cancelled + 1 && stopped.startsWith('stopped'), `${cancelled} -> ${after}, ${stopped}`);

  // 3. Regenerate: the last answer is replaced by a new one.
  await setField('max_tokens', '24');
  const before = await assistants();
  await page.click('#regen');
  await page.waitForFunction((n) => {
    const l = document.querySelectorAll('.msg.assistant');
    return l.length === n && l[n - 1].dataset.done === 'true';
  }, { timeout: 30000 }, before);
  check('regenerate replaces the last answer', (await assistants()) === before);

  // 4. An answer that is HTML stays text: a JSON schema forces it (JSON mode of the page).
  const html = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><iframe src="/"></iframe><b>bold</b> **strong** `code`';
  await page.click('#json_mode');
  await setField('schema', JSON.stringify({ type: 'object', properties: { html: { const: html } }, required: ['html'], additionalProperties: false }));
  await setField('max_tokens', '200');
  await send('Answer in HTML.');
  await page.waitForFunction((n) => document.querySelectorAll('.msg.assistant[data-done="true"]').length === n + 1, { timeout: 30000 }, before);
  await new Promise((r) => setTimeout(r, 300));  // any injected handler would have run by now
  const inert = await page.evaluate(() => {
    const m = [...document.querySelectorAll('.msg.assistant')].pop();
    const body = m.querySelector('.body');
    return {
      pwned: window.__pwned ?? null,
      text: body.textContent,
      tags: [...body.querySelectorAll('*')].map((e) => e.tagName.toLowerCase()),
    };
  });
  check('an HTML answer is shown as text: nothing runs, no element is made of it',
    inert.pwned === null && inert.text.includes('<img src=x onerror=') && inert.text.includes('<script>') &&
    !inert.tags.some((t) => ['img', 'script', 'iframe', 'b'].includes(t)), JSON.stringify(inert));
  check('Markdown in an answer is rendered (bold, code)', inert.tags.includes('strong') && inert.tags.includes('code'), JSON.stringify(inert.tags));
  await page.click('#json_mode');
  await page.screenshot({ path: `${outdir}/chat.png` });

  // 5. The dashboard follows /metrics while the load generator runs.
  await page.click('#tab-dash');
  const lg = spawn(loadgen, ['--port', port, '--requests', '60', '--concurrency', '6', '--input-mean', '40', '--output-mean', '48'], { stdio: 'ignore' });
  const lgDone = new Promise((r) => lg.on('exit', r));
  const saw = { running: 0, rate: 0, points: 0 };
  for (let i = 0; i < 150 && !(saw.running > 0 && saw.rate > 0 && saw.points >= 5); i++) {
    await new Promise((r) => setTimeout(r, 200));
    const v = await page.evaluate(() => ({
      running: Number(document.getElementById('m-running').textContent) || 0,
      rate: Number(document.getElementById('m-gen-rate').textContent) || 0,
      points: Number(document.getElementById('c-tokens').dataset.points ?? 0),
      kvPoints: Number(document.getElementById('c-kv').dataset.points ?? 0),
    }));
    saw.running = Math.max(saw.running, v.running);
    saw.rate = Math.max(saw.rate, v.rate);
    saw.points = Math.min(v.points, v.kvPoints);
  }
  await page.screenshot({ path: `${outdir}/dashboard.png` });
  check('the dashboard charts update while load runs (running requests, decode tokens/s)', saw.running > 0 && saw.rate > 0 && saw.points >= 5, JSON.stringify(saw));
  const memory = await page.$eval('#memory', (e) => e.textContent);
  check('the memory split is shown', /weights: [\d.]+ MiB/.test(memory) && memory.includes('kv used'), memory);
  lg.kill();
  await lgDone;
  check('no page error, failed request or request to another host', problems.length === 0, problems.join(' | '));
} catch (e) {
  check('the browser session', false, e.stack ?? String(e));
} finally {
  clearTimeout(timer);
  await browser.close();
}
console.log(failures === 0 ? 'ui: all passed' : `ui: ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
