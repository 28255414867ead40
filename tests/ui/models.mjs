// The web page with several models (serve --models-dir): the picker lists each with its
// status, a chat goes to the model picked (loaded on demand), and the dashboard draws one
// memory bar per loaded model against the budget.
// usage: node models.mjs PORT
import puppeteer from 'puppeteer-core';

const [port] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ui models: ${name}${ok ? '' : ' ' + detail}`);
  if (!ok) failures++;
}
async function metric(name, model) {
  const text = await (await fetch(base + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{model_name="${model}"}`));
  return line ? parseFloat(line.split(' ').pop()) : NaN;
}

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  defaultViewport: { width: 1280, height: 800 },
});
const timer = setTimeout(() => { console.log('FAIL ui models: timed out'); process.exit(1); }, 60000);
try {
  const page = await browser.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  await page.goto(base + '/', { waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="true"]', { timeout: 10000 });
  const options = await page.$$eval('#model option', (l) => l.map((o) => o.value));
  check('the picker lists every model', JSON.stringify(options) === '["stories","tiny"]', JSON.stringify(options));
  const status = await page.$eval('#model-status', (e) => e.textContent);
  check('the picked model shows its status', status === 'unloaded', status);
  await page.select('#model', 'tiny');
  await page.$eval('#max_tokens', (e) => { e.value = '16'; e.dispatchEvent(new Event('change')); });
  await page.click('#input');
  await page.keyboard.type('hello');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.msg.assistant[data-done="true"], .msg.assistant[data-error]', { timeout: 30000 });
  const err = await page.$eval('.msg.assistant', (m) => m.dataset.error ?? '');
  check('a chat with the picked model is answered', err === '', err);
  check('the picked model served it (and is loaded)', (await metric('vllm:generation_tokens_total', 'tiny')) > 0 &&
    (await metric('paddock_model_loaded', 'stories')) === 0);
  await page.waitForFunction(() => document.querySelector('#model-status').textContent === 'loaded', { timeout: 5000 });
  check('its status turns to loaded', true);
  await page.click('#tab-dash');
  await page.waitForSelector('.model-memory[data-model="tiny"]', { timeout: 10000 });
  const budget = await page.$eval('#budget', (e) => e.textContent);
  check('the dashboard shows memory per loaded model against the budget', /of a .* budget; 1 of 2 models loaded/.test(budget), budget);
  const disk = await page.$eval('#kvdisk', (e) => e.textContent);
  check('the dashboard shows the KV disk tier (--kv-disk)', /^KV disk tier: \d+ blocks read back .* written .* dropped, \d+ corrupt; .* of .*/.test(disk), disk);
  check('no page errors', problems.length === 0, problems.join('; '));
} catch (e) {
  check('the page with several models', false, String(e));
} finally {
  clearTimeout(timer);
  await browser.close();
}
process.exit(failures ? 1 : 0);
