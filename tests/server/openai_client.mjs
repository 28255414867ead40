// Drives a running `paddock serve` with the official OpenAI client library (npm "openai"):
// completions and chat completions, streaming and not, the model list, and a 400 error.
// usage: node openai_client.mjs PORT MODEL EXPECTED_COMPLETION_TEXT
import OpenAI from 'openai';

const [port, model, expected] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} openai-client: ${name}${ok ? '' : ' ' + detail}`);
  if (!ok) failures++;
}

const prompt = 'Once upon a time';
const c = await client.completions.create({ model, prompt, max_tokens: 30, temperature: 0 });
check('completion text equals paddock run', c.choices[0].text === expected, JSON.stringify(c.choices[0].text));
check('completion usage', c.usage.completion_tokens === 30 && c.usage.prompt_tokens > 0, JSON.stringify(c.usage));
check('completion finish_reason', c.choices[0].finish_reason === 'length', c.choices[0].finish_reason);

let streamed = '';
let finish = null;
const s = await client.completions.create({ model, prompt, max_tokens: 30, temperature: 0, stream: true });
for await (const chunk of s) {
  streamed += chunk.choices[0]?.text ?? '';
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
check('streamed completion equals non-streamed', streamed === expected, JSON.stringify(streamed));
check('streamed completion finish_reason', finish === 'length', String(finish));

const messages = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me about a dog.' }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 20, temperature: 0 });
const reply = chat.choices[0].message.content;
check('chat reply', chat.choices[0].message.role === 'assistant' && typeof reply === 'string' && reply.length > 0, JSON.stringify(chat.choices[0]));

let chatStreamed = '';
let sawRole = false;
let usage = null;
const cs = await client.chat.completions.create({ model, messages, max_tokens: 20, temperature: 0, stream: true, stream_options: { include_usage: true } });
for await (const chunk of cs) {
  if (chunk.choices.length > 0) {
    if (chunk.choices[0].delta.role === 'assistant') sawRole = true;
    chatStreamed += chunk.choices[0].delta.content ?? '';
  }
  if (chunk.usage) usage = chunk.usage;
}
check('streamed chat equals non-streamed', chatStreamed === reply, JSON.stringify(chatStreamed));
check('streamed chat role and usage', sawRole && usage && usage.completion_tokens === chat.usage.completion_tokens, JSON.stringify(usage));

// The next turn sends the reply back as the client got it, plus what OpenAI's own messages carry
// (refusal: null, annotations), with the fields agent frameworks add to every request.
const turn2 = [...messages, { ...chat.choices[0].message, refusal: null, annotations: [] }, { role: 'user', content: 'And then?' }];
const chat2 = await client.chat.completions.create({
  model, messages: turn2, max_tokens: 8, temperature: 0, store: false, metadata: { run: 'test' },
  service_tier: 'auto', reasoning_effort: 'low', parallel_tool_calls: false,
});
check('second turn with the reply sent back', typeof chat2.choices[0].message.content === 'string' && chat2.usage.prompt_tokens > chat.usage.prompt_tokens, JSON.stringify(chat2.choices[0]));
const turn3 = [...turn2, chat2.choices[0].message, { role: 'user', content: 'The end.' }];
const chat3 = await client.chat.completions.create({ model, messages: turn3, max_tokens: 4, temperature: 0 });
check('third turn', chat3.choices[0].message.role === 'assistant', JSON.stringify(chat3.choices[0]));
const got = await client.models.retrieve(model);
check('models.retrieve', got.id === model && got.object === 'model', JSON.stringify(got));
try {
  await client.models.retrieve('no-such-model');
  check('models.retrieve of an unknown id is a 404', false, 'no error');
} catch (e) {
  check('models.retrieve of an unknown id is a 404', e.status === 404 && e.code === 'model_not_found', `${e.status} ${e.code}`);
}

const list = await client.models.list();
check('model list', list.data.length === 1 && list.data[0].id === model, JSON.stringify(list.data));

try {
  await client.completions.create({ model: 'no-such-model', prompt, max_tokens: 5 });
  check('unknown model is refused', false, 'no error');
} catch (e) {
  check('unknown model is refused', e.status === 404 && e.code === 'model_not_found', `${e.status} ${e.code}`);
}
try {
  await client.chat.completions.create({ model, messages, temperature: 9 });
  check('out-of-range temperature is refused', false, 'no error');
} catch (e) {
  check('out-of-range temperature is refused', e.status === 400 && e.param === 'temperature', `${e.status} ${e.param}`);
}
process.exit(failures === 0 ? 0 : 1);
