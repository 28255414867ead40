// Tool calls through the official OpenAI client (npm "openai"), arguments checked by ajv:
// tool_choice required / named / auto / none, parallel_tool_calls, streaming, the round trip of
// a tool result, and the 400s for bad tool definitions.
// With HARMONY set (a gpt-oss model): replies' channel markup never reaches content or
// reasoning_content, streamed or whole.
// usage: node tools.mjs PORT MODEL [N] [HARMONY]
import OpenAI from 'openai';
import Ajv from 'ajv';

const [port, model, nArg, harmony] = process.argv.slice(2);
const N = Number(nArg ?? 20);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const ajv = new Ajv({ strict: true });
let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} tools: ${name}${ok ? '' : ' ' + detail}`);
  if (!ok) failures++;
}
const weather = {
  type: 'object',
  properties: { location: { type: 'string', minLength: 1, maxLength: 20 }, unit: { enum: ['celsius', 'fahrenheit'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['location', 'unit'], additionalProperties: false,
};
const search = { type: 'object', properties: { query: { type: 'string', maxLength: 30 } }, required: ['query'], additionalProperties: false };
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather for a place', parameters: weather } },
  { type: 'function', function: { name: 'search', description: 'Search the web', parameters: search } },
];
const validators = { get_weather: ajv.compile(weather), search: ajv.compile(search) };
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
const free = { temperature: 1, top_p: 1, top_k: 0, min_p: 0, max_tokens: 200 };

function callsValid(choice, names) {
  const calls = choice.message.tool_calls ?? [];
  if (choice.finish_reason !== 'tool_calls' || calls.length === 0) return `finish ${choice.finish_reason}, ${calls.length} calls: ${JSON.stringify(choice.message)}`;
  for (const c of calls) {
    if (c.type !== 'function' || typeof c.id !== 'string' || !names.includes(c.function.name)) return 'bad call ' + JSON.stringify(c);
    let args;
    try { args = JSON.parse(c.function.arguments); } catch { return 'arguments do not parse: ' + c.function.arguments; }
    if (!validators[c.function.name](args)) return 'invalid arguments ' + c.function.arguments + ' ' + ajv.errorsText(validators[c.function.name].errors);
  }
  return null;
}

// required: every reply is one or more valid calls
{
  const bad = [];
  for (let i = 0; i < N; i++) {
    const r = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required', seed: i, ...free });
    const why = callsValid(r.choices[0], ['get_weather', 'search']);
    if (why) bad.push(why);
  }
  check(`tool_choice required: ${N - bad.length} of ${N} replies are valid calls`, bad.length === 0, bad.slice(0, 2).join(' | '));
}
// named, not parallel: exactly one call of that function
{
  const bad = [];
  for (let i = 0; i < N; i++) {
    const r = await client.chat.completions.create({ model, messages, tools, tool_choice: { type: 'function', function: { name: 'search' } }, parallel_tool_calls: false, seed: 100 + i, ...free });
    const why = callsValid(r.choices[0], ['search']) ?? (r.choices[0].message.tool_calls.length === 1 ? null : 'several calls');
    if (why) bad.push(why);
  }
  check(`named tool, parallel_tool_calls false: ${N - bad.length} of ${N} are one call of it`, bad.length === 0, bad.slice(0, 2).join(' | '));
}
// streaming: the deltas assemble to the same call as the whole response
{
  const whole = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required', seed: 5, ...free });
  const s = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required', seed: 5, ...free, stream: true });
  const calls = [];
  let finish = null;
  for await (const chunk of s) {
    for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
      calls[d.index] ??= { name: '', arguments: '' };
      calls[d.index].name += d.function?.name ?? '';
      calls[d.index].arguments += d.function?.arguments ?? '';
    }
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  const want = whole.choices[0].message.tool_calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments }));
  check('streamed tool_calls deltas assemble to the same calls', JSON.stringify(calls) === JSON.stringify(want) && finish === 'tool_calls', JSON.stringify([calls, want, finish]));
  // The round trip: the call and its result go back into the conversation.
  const call = whole.choices[0].message.tool_calls[0];
  const followup = [...messages, { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21, "sky": "clear"}' }];
  const r2 = await client.chat.completions.create({ model, messages: followup, tools, seed: 6, max_tokens: 20, temperature: 0 });
  const r0 = await client.chat.completions.create({ model, messages, tools, seed: 6, max_tokens: 20, temperature: 0 });
  check('a tool result round-trips into the prompt', r2.usage.prompt_tokens > r0.usage.prompt_tokens + 20 && typeof r2.choices[0].finish_reason === 'string', `${r2.usage.prompt_tokens} vs ${r0.usage.prompt_tokens}`);
  const none = await client.chat.completions.create({ model, messages, tools, tool_choice: 'none', seed: 6, max_tokens: 20, temperature: 0 });
  check('tool_choice none: no calls, tools not described', !none.choices[0].message.tool_calls && none.usage.prompt_tokens < r0.usage.prompt_tokens, JSON.stringify(none.usage));
}

// harmony: free replies of a random gpt-oss emit its markers at random; the parser takes them all
if (harmony) {
  const markup = /<\|(start|channel|message|constrain)\|>/;
  const bad = [];
  let reasoning = 0;
  for (let i = 0; i < 6; i++) {
    const body = { model, messages, seed: 300 + i, ...free, max_tokens: 80 };
    const r = await client.chat.completions.create(body);
    const m = r.choices[0].message;
    if (m.reasoning_content) reasoning++;
    for (const t of [m.content ?? '', m.reasoning_content ?? '']) if (markup.test(t)) bad.push(JSON.stringify(m));
    const s = await client.chat.completions.create({ ...body, stream: true });
    let content = '', rc = '';
    for await (const chunk of s) {
      content += chunk.choices[0]?.delta?.content ?? '';
      rc += chunk.choices[0]?.delta?.reasoning_content ?? '';
    }
    if (content !== (m.content ?? '') || rc !== (m.reasoning_content ?? '')) bad.push(`stream differs: ${JSON.stringify([content, rc, m])}`);
  }
  check(`harmony: no channel markup in 6 free replies, streamed == whole (${reasoning} had reasoning)`, bad.length === 0, bad.slice(0, 2).join(' | '));
}

// bad definitions: 400 naming the field
async function expect400(name, body, param) {
  try {
    await client.chat.completions.create({ model, messages, max_tokens: 5, ...body });
    check(name, false, 'no error');
  } catch (e) {
    check(name, e.status === 400 && e.error?.param === param, `${e.status} ${JSON.stringify(e.error)}`);
  }
}
await expect400('malformed parameter schema', { tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'strnig' } } } } }] }, 'tools[0].function.parameters');
await expect400('unsupported schema keyword', { tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', not: { required: ['a'] } } } }] }, 'tools[0].function.parameters');
await expect400('bad function name', { tools: [{ type: 'function', function: { name: 'a b' } }] }, 'tools[0].function.name');
await expect400('duplicate names', { tools: [tools[0], tools[0]] }, 'tools[1].function.name');
await expect400('tool_choice naming no tool', { tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice');
await expect400('tool_choice required without tools', { tool_choice: 'required' }, 'tool_choice');
await expect400('unknown tool type', { tools: [{ type: 'retrieval' }] }, 'tools[0].type');
await expect400('arguments that are not JSON', { messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'x', type: 'function', function: { name: 'f', arguments: '{oops' } }] }, { role: 'user', content: 'x' }] }, 'messages[0].tool_calls[0].function.arguments');

console.log(failures === 0 ? 'tools: all passed' : `tools: ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
