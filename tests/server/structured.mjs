// Structured output through the official OpenAI client (npm "openai"), checked by an
// independent validator (npm "ajv" + "ajv-formats"): for each schema in SCHEMA_DIR, N chat
// completions with response_format json_schema at temperature 1 (all sampling filters off), on a
// model that has never seen JSON; every output must parse and validate. Then json_object, a
// GBNF grammar, llama-server's aliases, streaming, and the 400s for bad schemas and grammars.
// Requests run 16 at a time, mixed with unconstrained ones (they share batches).
// usage: node structured.mjs PORT MODEL SCHEMA_DIR [N]
import OpenAI from 'openai';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const [port, model, dir, nArg] = process.argv.slice(2);
const N = Number(nArg ?? 100);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const ajv = new Ajv({ strict: true, allErrors: true });
addFormats(ajv);
let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} structured: ${name}${ok ? '' : ' ' + detail}`);
  if (!ok) failures++;
}
const free = { temperature: 1, top_p: 1, top_k: 0, min_p: 0 };
const messages = [{ role: 'user', content: 'Tell me about a dog.' }];

async function pool(n, width, fn) {
  const out = new Array(n);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < n) {
      const i = next++;
      out[i] = await fn(i);
    }
  }));
  return out;
}

// n constrained requests, 16 at a time, every fourth slot also running an unconstrained one.
async function many(n, body, accept) {
  let bad = [];
  await pool(n, 16, async (i) => {
    const side = i % 4 === 0 ? client.chat.completions.create({ model, messages, max_tokens: 40, ...free, seed: 1000 + i }) : null;
    const r = await client.chat.completions.create({ model, messages, max_tokens: 450, ...free, seed: i, ...body });
    if (side) await side;
    const text = r.choices[0].message.content;
    const why = accept(text, r.choices[0].finish_reason);
    if (why) bad.push(`#${i} ${why}: ${JSON.stringify(text).slice(0, 300)}`);
  });
  return bad;
}

function jsonAccept(validate) {
  return (text, finish) => {
    if (finish !== 'stop') return `finish_reason ${finish}`;
    let v;
    try { v = JSON.parse(text); } catch (e) { return 'does not parse'; }
    if (validate && !validate(v)) return 'invalid: ' + ajv.errorsText(validate.errors);
    return null;
  };
}

const schemas = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
check('at least 6 schemas', schemas.length >= 6, String(schemas.length));
for (const f of schemas) {
  const schema = JSON.parse(readFileSync(join(dir, f), 'utf8'));
  const validate = ajv.compile(schema);
  const t0 = Date.now();
  const bad = await many(N, { response_format: { type: 'json_schema', json_schema: { name: f.replace('.json', ''), schema, strict: true } } }, jsonAccept(validate));
  check(`${f}: ${N - bad.length} of ${N} parse and validate (${((Date.now() - t0) / 1000).toFixed(1)} s)`, bad.length === 0, bad.slice(0, 3).join(' | '));
}

{
  const bad = await many(N, { response_format: { type: 'json_object' } }, (text, finish) => {
    const why = jsonAccept(null)(text, finish);
    if (why) return why;
    const v = JSON.parse(text);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? null : 'not an object';
  });
  check(`json_object: ${N - bad.length} of ${N} are JSON objects`, bad.length === 0, bad.slice(0, 3).join(' | '));
}

{
  const grammar = readFileSync(join(dir, 'list.gbnf'), 'utf8');
  const re = /^(- [a-z][a-z ]{0,15} \([1-9][0-9]?\)\n){1,5}$/;
  const bad = await many(N, { grammar }, (text, finish) => (finish !== 'stop' ? `finish_reason ${finish}` : re.test(text) ? null : 'does not match'));
  check(`GBNF grammar: ${N - bad.length} of ${N} match`, bad.length === 0, bad.slice(0, 3).join(' | '));
}

// llama-server's json_schema alias and a completion (not chat) under a schema.
{
  const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['n'], additionalProperties: false };
  const validate = ajv.compile(schema);
  const r = await client.chat.completions.create({ model, messages, max_tokens: 100, ...free, seed: 5, json_schema: schema });
  check('json_schema alias (llama-server)', jsonAccept(validate)(r.choices[0].message.content, r.choices[0].finish_reason) === null, r.choices[0].message.content);
  const c = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 100, ...free, seed: 6, response_format: { type: 'json_schema', json_schema: { name: 'n', schema } } });
  check('completions take response_format too', jsonAccept(validate)(c.choices[0].text, c.choices[0].finish_reason) === null, c.choices[0].text);
  // Near max_tokens the grammar is steered to close: 3 tokens still give a whole object.
  const tight = await client.chat.completions.create({ model, messages, max_tokens: 3, ...free, seed: 7, response_format: { type: 'json_object' } });
  check('json_object completes within max_tokens 3', jsonAccept(null)(tight.choices[0].message.content, tight.choices[0].finish_reason) === null, JSON.stringify(tight.choices[0]));
  // No completion fits: cut off by max_tokens, finish_reason length (the JSON incomplete).
  const long = { const: 'a sentence much longer than three tokens can hold' };
  const cut = await client.chat.completions.create({ model, messages, max_tokens: 3, ...free, seed: 7, response_format: { type: 'json_schema', json_schema: { name: 'c', schema: long } } });
  check('max_tokens cut-off reports length', cut.choices[0].finish_reason === 'length', cut.choices[0].finish_reason);
}

// Streaming: the deltas assemble to valid JSON.
{
  const schema = JSON.parse(readFileSync(join(dir, 'nested.json'), 'utf8'));
  const validate = ajv.compile(schema);
  let text = '';
  let finish = null;
  const s = await client.chat.completions.create({ model, messages, max_tokens: 450, ...free, seed: 11, stream: true, response_format: { type: 'json_schema', json_schema: { name: 'nested', schema } } });
  for await (const chunk of s) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  check('streamed json_schema output validates', jsonAccept(validate)(text, finish) === null, text);
}

// Bad schemas and grammars: 400 naming the problem.
async function expect400(name, body, param, fragment) {
  try {
    await client.chat.completions.create({ model, messages, max_tokens: 10, ...body });
    check(name, false, 'no error');
  } catch (e) {
    const ok = e.status === 400 && e.error?.param === param && String(e.error?.message).includes(fragment);
    check(name, ok, `${e.status} ${JSON.stringify(e.error)}`);
  }
}
const rf = (schema) => ({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } });
await expect400('unsupported keyword', rf({ type: 'object', not: { required: ['a'] } }), 'response_format', "'not'");
await expect400('unknown type', rf({ type: 'strnig' }), 'response_format', "unknown type 'strnig'");
await expect400('dangling $ref', rf({ $ref: '#/$defs/nope' }), 'response_format', 'points nowhere');
await expect400('unsatisfiable bounds', rf({ type: 'integer', minimum: 3, maximum: 2 }), 'response_format', 'no integer');
await expect400('schema with no finite instance', rf({ $defs: { a: { type: 'object', properties: { n: { $ref: '#/$defs/a' } }, required: ['n'] } }, $ref: '#/$defs/a' }), 'response_format', 'no finite');
await expect400('missing schema', { response_format: { type: 'json_schema', json_schema: { name: 'x' } } }, 'response_format.json_schema.schema', 'required');
await expect400('unknown response_format type', { response_format: { type: 'yaml' } }, 'response_format.type', "'yaml'");
await expect400('invalid GBNF', { grammar: 'root ::= "a' }, 'grammar', 'unterminated');
await expect400('undefined GBNF rule', { grammar: 'root ::= item' }, 'grammar', "undefined rule 'item'");
await expect400('left-recursive GBNF', { grammar: 'root ::= root "a" | "b"' }, 'grammar', 'left-recursive');
await expect400('two grammars at once', { grammar: 'root ::= "a"', response_format: { type: 'json_object' } }, 'grammar', 'give one of');

console.log(failures === 0 ? 'structured: all passed' : `structured: ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
