// The web page with a vision model (serve --mmproj): an image attached with the file picker and
// one pasted into the message box go with the message as OpenAI image_url parts (data: URLs),
// the chat is answered, the encoder ran, and the images show in the conversation.
// usage: node images.mjs PORT IMAGE.png
import puppeteer from 'puppeteer-core';
import { readFileSync } from 'node:fs';

const [port, image] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ui images: ${name}${ok ? '' : ' ' + detail}`);
  if (!ok) failures++;
}
async function metric(name) {
  const text = await (await fetch(base + '/metrics')).text();
  return text.split('\n').filter((l) => l.startsWith(name + '{')).reduce((a, l) => a + parseFloat(l.split(' ').pop()), 0);
}

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  defaultViewport: { width: 1280, height: 800 },
});
const timer = setTimeout(() => { console.log('FAIL ui images: timed out'); process.exit(1); }, 60000);
try {
  const page = await browser.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  const bodies = [];
  page.on('request', (r) => { if (r.url().endsWith('/v1/chat/completions')) bodies.push(r.postData() ?? ''); });
  await page.goto(base + '/', { waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="true"]', { timeout: 10000 });
  await page.$eval('#max_tokens', (e) => { e.value = '8'; e.dispatchEvent(new Event('change')); });
  // The file picker.
  const input = await page.$('#image');
  await input.uploadFile(image);
  await page.waitForSelector('#attached img.thumb', { timeout: 5000 });
  // A paste of the same bytes as a file into the message box.
  const b64 = readFileSync(image).toString('base64');
  await page.$eval('#input', (el, data) => {
    const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
    const dt = new DataTransfer();
    dt.items.add(new File([bytes], 'pasted.png', { type: 'image/png' }));
    el.dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt, bubbles: true }));
  }, b64);
  await page.waitForFunction(() => document.querySelectorAll('#attached img.thumb').length === 2, { timeout: 5000 });
  check('an uploaded and a pasted image are attached', true);
  await page.click('#input');
  await page.keyboard.type('What is this?');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.msg.assistant[data-done="true"], .msg.assistant[data-error]', { timeout: 30000 });
  const err = await page.$eval('.msg.assistant', (m) => m.dataset.error ?? '');
  check('the chat with images is answered', err === '', err);
  const body = JSON.parse(bodies[0] ?? '{}');
  const parts = body.messages?.find((m) => m.role === 'user')?.content;
  check('the request carries both images as image_url parts (data: URLs)',
    Array.isArray(parts) && parts.filter((p) => p.type === 'image_url' && p.image_url.url.startsWith('data:image/png;base64,')).length === 2,
    JSON.stringify(parts)?.slice(0, 200));
  check('the server encoded the image', (await metric('paddock_image_tiles_encoded_total')) >= 1);
  const shown = await page.$$eval('.msg.user img.thumb', (l) => l.length);
  check('the images show in the conversation', shown === 2, String(shown));
  check('the composer is cleared', (await page.$$eval('#attached img', (l) => l.length)) === 0);
  check('no page errors', problems.length === 0, problems.join('; '));
} catch (e) {
  check('the page with images', false, String(e));
} finally {
  clearTimeout(timer);
  await browser.close();
}
process.exit(failures ? 1 : 0);
