// Logprobs, echo and n > 1 through the official OpenAI client (npm "openai") and raw HTTP.
// usage: node choices.mjs PORT MODEL PADDOCK_BIN MODEL_FILE (the file the server runs)
// The echoed prompt's log-probabilities are checked against `paddock perplexity` on the same
// tokens (one window), the n > 1 prefill against /metrics (the prompt counted once).
import OpenAI from 'openai';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [port, model, bin, modelFile] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} choices: ${name}${ok ? '' : ' ' + detail}`);
  if (!ok) failures++;
}
async function post(path, body) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}
async function metric(name) {
  const t = await (await fetch(base + '/metrics')).text();
  const m = t.match(new RegExp(`^${name.replace(/[:]/g, '\\$&')}\\{[^}]*\\} ([0-9.e+-]+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}
const prompt = 'Once upon a time';

// --- completions: logprobs N
{
  const c = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, logprobs: 3 });
  const lp = c.choices[0].logprobs;
  check('completion logprobs shape', lp && lp.tokens.length === c.usage.completion_tokens &&
    lp.token_logprobs.length === lp.tokens.length && lp.top_logprobs.length === lp.tokens.length &&
    lp.text_offset.length === lp.tokens.length, JSON.stringify(lp));
  check('tokens spell the text', lp.tokens.join('') === c.choices[0].text, JSON.stringify([lp.tokens.join(''), c.choices[0].text]));
  check('logprobs are log-probabilities', lp.token_logprobs.every((x) => x <= 0 && x > -100));
  const greedyTop = lp.top_logprobs.every((t, i) => Object.keys(t).length >= 1 && Object.keys(t).length <= 3 &&
    Math.abs(Math.max(...Object.values(t)) - lp.token_logprobs[i]) < 1e-6);
  check('greedy: the chosen token is the most likely one', greedyTop, JSON.stringify(lp.top_logprobs));
  check('text_offset counts characters', lp.text_offset.every((o, i) => i === 0 ? o === 0 : o === lp.text_offset[i - 1] + [...lp.tokens[i - 1]].length), JSON.stringify(lp.text_offset));
  // Sampled at temperature 2 with top-k: logprobs stay the model's own distribution (the same
  // token, the same value whatever the sampling settings).
  const hot = await client.completions.create({ model, prompt, max_tokens: 1, temperature: 0, logprobs: 0, top_k: 3, frequency_penalty: 2 });
  check('logprobs do not depend on sampling settings', Math.abs(hot.choices[0].logprobs.token_logprobs[0] - lp.token_logprobs[0]) < 1e-6,
    `${hot.choices[0].logprobs.token_logprobs[0]} vs ${lp.token_logprobs[0]}`);
}

// --- a generation that ends on the end-of-generation token lists it last (as OpenAI's legacy
// completions list <|endoftext|>): spelled, no text, its probability among the alternatives
{
  const c = await client.completions.create({ model, prompt, max_tokens: 400, temperature: 0, logprobs: 2 });
  const lp = c.choices[0].logprobs;
  const last = lp.tokens.length - 1;
  check('the ending token closes the logprobs', c.choices[0].finish_reason === 'stop' && lp.tokens[last] === '<s>' &&
    lp.tokens.slice(0, last).join('') === c.choices[0].text && lp.text_offset[last] === [...c.choices[0].text].length &&
    Math.abs(lp.top_logprobs[last]['<s>'] - lp.token_logprobs[last]) < 1e-6, JSON.stringify([c.choices[0].finish_reason, lp.tokens.slice(-2), lp.top_logprobs[last]]));
  const s = await client.completions.create({ model, prompt, max_tokens: 400, temperature: 0, logprobs: 2, stream: true });
  const tokens = [];
  for await (const chunk of s) tokens.push(...(chunk.choices[0]?.logprobs?.tokens ?? []));
  check('streamed, the ending token is listed too', JSON.stringify(tokens) === JSON.stringify(lp.tokens), JSON.stringify(tokens.slice(-2)));
}

// --- chat: logprobs + top_logprobs, streamed and not
{
  const messages = [{ role: 'user', content: 'Tell me about a cat.' }];
  const c = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = c.choices[0].logprobs?.content ?? [];
  check('chat logprobs shape', content.length === c.usage.completion_tokens && content.every((t) =>
    typeof t.token === 'string' && t.logprob <= 0 && Array.isArray(t.bytes) && t.top_logprobs.length === 2 &&
    Buffer.from(t.bytes).toString('latin1') === Buffer.from(t.token, 'utf8').toString('latin1')), JSON.stringify(content[0]));
  let streamed = [];
  let text = '';
  const s = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 2, stream: true });
  for await (const chunk of s) {
    text += chunk.choices[0]?.delta?.content ?? '';
    streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
  }
  check('streamed chat logprobs equal the whole response', JSON.stringify(streamed) === JSON.stringify(content) && text === c.choices[0].message.content,
    JSON.stringify([streamed.length, content.length]));
  const none = await client.chat.completions.create({ model, messages, max_tokens: 3, temperature: 0 });
  check('no logprobs unless asked', none.choices[0].logprobs === null, JSON.stringify(none.choices[0].logprobs));
}

// --- echo: the prompt's log-probabilities agree with paddock perplexity (one 64-token window:
// BOS then 63 text tokens, the second half scored).
{
  const text = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big red ball. She wanted to play with it, but it was too high. Lily asked her mom for help.';
  const tok = (await post('/tokenize', { content: text, add_special: false })).body.tokens;
  const window = [1, ...tok.slice(0, 63)];  // as perplexity: BOS, then the text
  const dir = mkdtempSync(join(tmpdir(), 'paddock-echo-'));
  const file = join(dir, 'text.txt');
  writeFileSync(file, text);
  const r = await post('/v1/completions', { prompt: window, max_tokens: 0, echo: true, logprobs: 0, temperature: 0 });
  const lp = r.body.choices?.[0]?.logprobs;
  check('echo with max_tokens 0 scores the prompt', r.status === 200 && lp.token_logprobs.length === 64 && lp.token_logprobs[0] === null &&
    r.body.usage.completion_tokens === 0, JSON.stringify(r.body).slice(0, 300));
  // llama.cpp's windowing: the logits at positions 32..62 score the tokens at 33..63.
  const scored = lp.token_logprobs.slice(33);
  const ppl = Math.exp(-scored.reduce((a, b) => a + b, 0) / scored.length);
  const out = JSON.parse(execFileSync(bin, ['perplexity', '-m', modelFile, '-f', file, '--ctx', '64', '--chunks', '1', '--json'], { stdio: ['ignore', 'pipe', 'ignore'] }).toString());
  check(`echo logprobs match paddock perplexity (${ppl.toFixed(6)} vs ${out.ppl}, ${scored.length} vs ${out.tokens} tokens)`,
    scored.length === out.tokens && Math.abs(ppl - out.ppl) / out.ppl < 1e-4, JSON.stringify(out));
  const e2 = await client.completions.create({ model, prompt, max_tokens: 5, temperature: 0, echo: true });
  check('echo without logprobs returns prompt + completion', e2.choices[0].text.startsWith(prompt) && e2.choices[0].text.length > prompt.length, e2.choices[0].text);
  let st = '';
  const es = await client.completions.create({ model, prompt, max_tokens: 5, temperature: 0, echo: true, stream: true });
  for await (const chunk of es) st += chunk.choices[0]?.text ?? '';
  check('streamed echo equals the whole one', st === e2.choices[0].text, JSON.stringify([st, e2.choices[0].text]));
}

// --- n > 1: one prefill, forked choices
{
  const single = await client.completions.create({ model, prompt, max_tokens: 20, temperature: 0 });
  const before = await metric('vllm:prompt_tokens_total');
  const forkedBefore = await metric('paddock_forked_choices_total');
  const g = await client.completions.create({ model, prompt, max_tokens: 20, temperature: 0, n: 4 });
  const after = await metric('vllm:prompt_tokens_total');
  check('n: 4 returns 4 choices, indexed', g.choices.length === 4 && g.choices.every((c, i) => c.index === i), JSON.stringify(g.choices.map((c) => c.index)));
  check('greedy choices from the forked prompt equal the single greedy output', g.choices.every((c) => c.text === single.choices[0].text), JSON.stringify(g.choices.map((c) => c.text)));
  check(`the prompt was computed once (prompt tokens +${after - before}, prompt ${g.usage.prompt_tokens})`, after - before === g.usage.prompt_tokens, `${before} -> ${after}`);
  check('3 choices forked', (await metric('paddock_forked_choices_total')) - forkedBefore === 3);
  check('usage counts every choice', g.usage.completion_tokens === 80, JSON.stringify(g.usage));
  const hot = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 30, temperature: 1, seed: 7, n: 3 });
  const texts = hot.choices.map((c) => c.message.content);
  check('sampled choices differ (seed + i)', new Set(texts).size === 3, JSON.stringify(texts));
  const again = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 30, temperature: 1, seed: 7, n: 3 });
  check('and reproduce with the same seed', JSON.stringify(again.choices.map((c) => c.message.content)) === JSON.stringify(texts));
  // Streaming n: 2, with logprobs: each index assembles to its non-streamed choice.
  const s = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 1, seed: 3, n: 2, logprobs: 1, stream: true });
  const acc = ['', ''];
  const toks = [[], []];
  for await (const chunk of s) for (const c of chunk.choices) {
    acc[c.index] += c.text;
    toks[c.index].push(...(c.logprobs?.tokens ?? []));
  }
  const whole = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 1, seed: 3, n: 2, logprobs: 1 });
  check('streamed n: 2 assembles to the whole response', acc[0] === whole.choices[0].text && acc[1] === whole.choices[1].text &&
    toks[0].join('') === acc[0] && toks[1].join('') === acc[1], JSON.stringify([acc, whole.choices.map((c) => c.text)]));
  const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['n'], additionalProperties: false };
  const js = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 40, temperature: 1, seed: 1, n: 3,
    response_format: { type: 'json_schema', json_schema: { name: 'n', schema } } });
  check('n: 3 under a schema: every choice valid', js.choices.every((c) => { try { const v = JSON.parse(c.message.content); return Number.isInteger(v.n) && v.n >= 0 && v.n <= 9; } catch { return false; } }),
    JSON.stringify(js.choices.map((c) => c.message.content)));
}

// --- reasoning: the server runs with --reasoning-format deepseek; a grammar makes the model
// write a <think> section.
{
  const grammar = 'root ::= "<think>" [a-z]{2,8} " " [a-z]{2,8} "</think>" "\\n\\n" [a-z]{2,8} " " [a-z]{2,8}';
  const messages = [{ role: 'user', content: 'x' }];
  const c = await client.chat.completions.create({ model, messages, max_tokens: 60, temperature: 1, seed: 4, grammar });
  const m = c.choices[0].message;
  check('reasoning_content holds the <think> section, content the answer', /^[a-z]+ [a-z]+$/.test(m.reasoning_content ?? '') && /^[a-z]+ [a-z]+$/.test(m.content), JSON.stringify(m));
  let reasoning = '', content = '';
  const s = await client.chat.completions.create({ model, messages, max_tokens: 60, temperature: 1, seed: 4, grammar, stream: true });
  for await (const chunk of s) {
    reasoning += chunk.choices[0]?.delta?.reasoning_content ?? '';
    content += chunk.choices[0]?.delta?.content ?? '';
  }
  check('streamed reasoning_content and content deltas assemble to the same', reasoning === m.reasoning_content && content === m.content, JSON.stringify([reasoning, content]));
  const plain = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
  check('a reply without <think> is all content', plain.choices[0].message.reasoning_content == null && plain.choices[0].message.content.length > 0, JSON.stringify(plain.choices[0].message));
}

// --- embeddings: normalized, equal alone and in a batch, text = its tokens, float = base64
{
  const alone = await client.embeddings.create({ model, input: 'The cat sat on the mat.' });  // (the client asks base64)
  const batch = await client.embeddings.create({ model, input: ['A dog ran.', 'The cat sat on the mat.', 'Sun'] });
  const v = alone.data[0].embedding;
  const norm = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
  check('an embedding is L2-normalized, the model\'s width', Math.abs(norm - 1) < 1e-5 && v.length === 64, `${norm} ${v.length}`);
  check('equal alone and in a batch', batch.data.length === 3 && batch.data[1].index === 1 && batch.data[1].embedding.every((x, i) => Math.abs(x - v[i]) < 1e-6));
  const other = batch.data[0].embedding;
  check('different texts, different vectors', other.some((x, i) => Math.abs(x - v[i]) > 1e-3));
  const tok = (await post('/tokenize', { content: 'The cat sat on the mat.' })).body.tokens;
  const f = await post('/v1/embeddings', { model, input: [tok], encoding_format: 'float' });
  check('token input equals text input; float equals base64', f.status === 200 && f.body.data[0].embedding.every((x, i) => Math.abs(x - v[i]) < 1e-6) &&
    f.body.usage.prompt_tokens === tok.length, JSON.stringify(f.body).slice(0, 200));
  // dimensions (Matryoshka): the first N components, normalized again; the official client's.
  const d16 = await client.embeddings.create({ model, input: 'The cat sat on the mat.', dimensions: 16 });
  const w = d16.data[0].embedding;
  const head = Math.sqrt(v.slice(0, 16).reduce((a, x) => a + x * x, 0));
  check('dimensions 16: the first 16 components, normalized again', w.length === 16 && w.every((x, i) => Math.abs(x - v[i] / head) < 1e-5), JSON.stringify(w.slice(0, 4)));
  const bad = await post('/v1/embeddings', { model, input: 'x', dimensions: 65 });
  check('dimensions over the width -> 400 naming it', bad.status === 400 && bad.body.error.param === 'dimensions' && /width 64/.test(bad.body.error.message), JSON.stringify(bad.body));
  // Over the context: 400 naming the limit, or its first tokens with truncate (TEI's, Ollama's).
  const long = Array.from({ length: 5000 }, (_, i) => 1 + (i % 200));
  const over = await post('/v1/embeddings', { model, input: [long] });
  const ctx = Number((/exceeds the context of (\d+)/.exec(over.body.error?.message ?? '') ?? [])[1]);
  check('an input over the context -> 400 naming the limit', over.status === 400 && ctx > 0, JSON.stringify(over.body).slice(0, 200));
  const cut = await post('/v1/embeddings', { model, input: [long], truncate: true, encoding_format: 'float' });
  const first = await post('/v1/embeddings', { model, input: [long.slice(0, ctx)], encoding_format: 'float' });
  check('truncate: the first context-full of tokens', cut.status === 200 && cut.body.usage.prompt_tokens === ctx && cut.body.data[0].embedding.every((x, i) => Math.abs(x - first.body.data[0].embedding[i]) < 1e-6), JSON.stringify(cut.body).slice(0, 200));
  const empty = await post('/v1/embeddings', { model, input: '' });
  check('empty input -> 400', empty.status === 400 && empty.body.error.param === 'input', JSON.stringify(empty.body));
}

// --- bad values
await expect400('chat_template_kwargs need a Jinja template', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], chat_template_kwargs: { enable_thinking: false } }, 'chat_template_kwargs');
await expect400('chat_template_kwargs on completions', '/v1/completions', { prompt, chat_template_kwargs: { a: 1 } }, 'chat_template_kwargs');
await expect400('chat_template_kwargs that is not an object', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], chat_template_kwargs: [1] }, 'chat_template_kwargs');
async function expect400(name, path, body, param) {
  const r = await post(path, { model, ...body });
  check(name, r.status === 400 && r.body.error?.param === param, `${r.status} ${JSON.stringify(r.body)}`);
}
await expect400('n beyond 16', '/v1/completions', { prompt, n: 17 }, 'n');
await expect400('top_logprobs above 20', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], logprobs: true, top_logprobs: 21 }, 'top_logprobs');
await expect400('top_logprobs without logprobs', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }, 'top_logprobs');
await expect400('completion logprobs above 20', '/v1/completions', { prompt, logprobs: 21 }, 'logprobs');
await expect400('echo on chat', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], echo: true }, 'echo');
await expect400('max_tokens 0 without echo', '/v1/completions', { prompt, max_tokens: 0 }, 'max_tokens');
await expect400('best_of other than n', '/v1/completions', { prompt, n: 2, best_of: 3 }, 'best_of');

console.log(failures === 0 ? 'choices: all passed' : `choices: ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
