// The clients people run, unchanged, against `paddock serve`: the OpenAI client (current major,
// its Responses API, what the Agents SDK and Codex use), Anthropic's SDK (Messages API), Ollama's
// (its /api), the Vercel AI SDK through its OpenAI-compatible provider, LangChain's ChatOpenAI,
// and the OpenAI client's previous major (v4). Each holds a multi-turn conversation
// that sends back the message objects it got, streams, makes a tool call (forced, so a small
// model makes it) and sends its result back, and asks for structured output validated by ajv.
// usage: node clients.mjs PORT MODEL
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import { generateText, streamText, generateObject, tool, jsonSchema } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { HumanMessage, SystemMessage, ToolMessage } from '@langchain/core/messages';
import { z } from 'zod';
import Ajv from 'ajv';
import OpenAI from 'openai';
import OpenAI4 from './openai4/node_modules/openai/index.mjs';

const [port, model] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const ajv = new Ajv();
let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} clients: ${name}${ok ? '' : ' ' + detail}`);
  if (!ok) failures++;
}
async function section(name, fn) {
  try {
    await fn();
  } catch (e) {
    check(`${name}: no exception`, false, (e?.stack ?? String(e)).slice(0, 1500));
  }
}
const weather = {
  type: 'object',
  properties: { location: { type: 'string', minLength: 1, maxLength: 20 }, unit: { enum: ['celsius', 'fahrenheit'] } },
  required: ['location', 'unit'],
  additionalProperties: false,
};
const validWeather = ajv.compile(weather);
const person = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 20 }, age: { type: 'integer', minimum: 0, maximum: 120 } },
  required: ['name', 'age'],
  additionalProperties: false,
};
const validPerson = ajv.compile(person);

await section('openai-responses', async () => {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'sekret', maxRetries: 0 });
  const r1 = await client.responses.create({ model, instructions: 'You tell stories.', input: 'Tell me about a dog.', max_output_tokens: 16, temperature: 0 });
  check('responses: output_text', r1.object === 'response' && typeof r1.output_text === 'string' && r1.output_text.length > 0 && r1.usage.output_tokens > 0, JSON.stringify(r1).slice(0, 500));
  const stream = client.responses.stream({ model, instructions: 'You tell stories.', input: 'Tell me about a dog.', max_output_tokens: 16, temperature: 0 });
  let streamed = '';
  const types = [];
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') streamed += ev.delta;
  }
  check('responses: streamed deltas equal the whole output', streamed === r1.output_text && types[0] === 'response.created' && ['response.completed', 'response.incomplete'].includes(types.at(-1)), JSON.stringify({ streamed, first: types[0], last: types.at(-1) }));
  // The next turn sends the output items back as they came.
  const input = [{ role: 'user', content: 'Tell me about a dog.' }, ...r1.output, { role: 'user', content: 'And then?' }];
  const r2 = await client.responses.create({ model, input, max_output_tokens: 8, temperature: 0, store: false });
  check('responses: second turn with the output items sent back', r2.usage.input_tokens > r1.usage.input_tokens, JSON.stringify(r2.usage));
  const tools = [{ type: 'function', name: 'get_weather', description: 'Weather for a place', parameters: weather, strict: true }];
  const t = await client.responses.create({ model, tools, tool_choice: { type: 'function', name: 'get_weather' }, input: 'Weather in Paris?', max_output_tokens: 100 });
  const call = t.output.find((i) => i.type === 'function_call');
  check('responses: forced function_call with valid arguments', call && validWeather(JSON.parse(call.arguments)), JSON.stringify(t.output));
  const t2 = await client.responses.create({ model, tools, max_output_tokens: 8, input: [{ role: 'user', content: 'Weather in Paris?' }, ...t.output, { type: 'function_call_output', call_id: call.call_id, output: '21 C, sunny' }] });
  check('responses: function_call_output round trip', t2.object === 'response', '');
  const ts = client.responses.stream({ model, tools, tool_choice: { type: 'function', name: 'get_weather' }, input: 'Weather in Rome?', max_output_tokens: 100 });
  let args = null;
  for await (const ev of ts) if (ev.type === 'response.function_call_arguments.done') args = ev.arguments;
  check('responses: streamed function call arguments', args !== null && validWeather(JSON.parse(args)), String(args));
  const s = await client.responses.create({ model, input: 'Describe a person.', max_output_tokens: 80, text: { format: { type: 'json_schema', name: 'person', schema: person, strict: true } } });
  let parsed = null;
  try { parsed = JSON.parse(s.output_text); } catch {}
  check('responses: structured output validates', parsed !== null && validPerson(parsed), s.output_text);
  // Stored responses: previous_response_id continues the conversation (the same as sending its
  // items back: r2 above), the response can be retrieved and deleted; a tool call continued by
  // its output alone.
  const c2 = await client.responses.create({ model, previous_response_id: r1.id, input: 'And then?', max_output_tokens: 8, temperature: 0 });
  check('responses: previous_response_id continues the conversation (same prompt as the items sent back)', c2.usage.input_tokens === r2.usage.input_tokens && c2.output_text === r2.output_text, JSON.stringify({ c2: c2.usage, r2: r2.usage }));
  const got = await client.responses.retrieve(r1.id);
  check('responses: retrieve a stored response', got.id === r1.id && got.output_text === r1.output_text, JSON.stringify(got).slice(0, 300));
  const tc = await client.responses.create({ model, tools, previous_response_id: t.id, max_output_tokens: 8, input: [{ type: 'function_call_output', call_id: call.call_id, output: '21 C, sunny' }] });
  check('responses: a function call continued by previous_response_id and its output', tc.usage.input_tokens === t2.usage.input_tokens, JSON.stringify({ tc: tc.usage, t2: t2.usage }));
  await client.responses.delete(r1.id);
  for (const [what, fn] of [['retrieve after delete', () => client.responses.retrieve(r1.id)],
    ['unknown previous_response_id', () => client.responses.create({ model, input: 'x', previous_response_id: 'resp_nope' })],
    ['store: false is not kept', () => client.responses.retrieve(r2.id)]]) {
    try {
      await fn();
      check(`responses: ${what} is a 404`, false, 'answered');
    } catch (e) {
      check(`responses: ${what} is a 404`, e.status === 404, `${e.status} ${e.message}`);
    }
  }
});

await section('openai-chat', async () => {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'sekret', maxRetries: 0 });
  const messages = [{ role: 'user', content: 'Tell me about a dog.' }];
  const r1 = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
  messages.push(r1.choices[0].message, { role: 'user', content: 'And then?' });
  const r2 = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, store: false, metadata: { k: 'v' } });
  check('openai: second turn with the message sent back', r2.usage.prompt_tokens > r1.usage.prompt_tokens, JSON.stringify(r2.usage));
  const got = await client.models.retrieve(model);
  check('openai: models.retrieve', got.id === model, JSON.stringify(got));
});

await section('anthropic', async () => {
  const client = new Anthropic({ baseURL: base, apiKey: 'sekret', maxRetries: 0 });
  const messages = [{ role: 'user', content: 'Tell me about a dog.' }];
  const r1 = await client.messages.create({ model, max_tokens: 16, temperature: 0, system: 'You tell stories.', messages });
  check('anthropic: a message with text content', r1.type === 'message' && r1.role === 'assistant' && r1.content[0]?.type === 'text' && r1.usage.output_tokens > 0, JSON.stringify(r1));
  // Streaming: the SDK's own accumulator (it checks the event order) and the raw events.
  const final = await client.messages.stream({ model, max_tokens: 16, temperature: 0, system: 'You tell stories.', messages }).finalMessage();
  check('anthropic: streamed message equals the whole one', final.content[0]?.text === r1.content[0].text && final.stop_reason === r1.stop_reason, JSON.stringify(final));
  // The reply goes back as the SDK returned it.
  messages.push({ role: 'assistant', content: r1.content }, { role: 'user', content: 'And then?' });
  const r2 = await client.messages.create({ model, max_tokens: 8, temperature: 0, messages });
  check('anthropic: second turn with the reply sent back', r2.content.length > 0 && r2.usage.input_tokens > r1.usage.input_tokens, JSON.stringify(r2));
  // A forced tool call, and its result back.
  const tools = [{ name: 'get_weather', description: 'Weather for a place', input_schema: weather }];
  const t = await client.messages.create({ model, max_tokens: 100, tools, tool_choice: { type: 'tool', name: 'get_weather' }, messages: [{ role: 'user', content: 'Weather in Paris?' }] });
  const use = t.content.find((b) => b.type === 'tool_use');
  check('anthropic: tool_use block with valid input', t.stop_reason === 'tool_use' && use && use.name === 'get_weather' && validWeather(use.input), JSON.stringify(t.content));
  const t2 = await client.messages.create({
    model, max_tokens: 8, tools,
    messages: [{ role: 'user', content: 'Weather in Paris?' }, { role: 'assistant', content: t.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 C, sunny' }] }],
  });
  check('anthropic: tool result round trip', t2.type === 'message' && t2.usage.input_tokens > t.usage.input_tokens, JSON.stringify(t2));
  // Streamed tool use: the input arrives as input_json_delta and the SDK assembles it.
  const ts = await client.messages.stream({ model, max_tokens: 100, tools, tool_choice: { type: 'tool', name: 'get_weather' }, messages: [{ role: 'user', content: 'Weather in Rome?' }] }).finalMessage();
  const suse = ts.content.find((b) => b.type === 'tool_use');
  check('anthropic: streamed tool_use assembled by the SDK', suse && validWeather(suse.input), JSON.stringify(ts.content));
  try {
    await client.messages.create({ model, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }], max_tokens: 4 });
    check('anthropic: an image is refused in its error shape', false, 'accepted');
  } catch (e) {
    check('anthropic: an image is refused in its error shape', e.status === 400 && e.error?.type === 'error' && e.error?.error?.type === 'invalid_request_error', JSON.stringify(e.error));
  }
});

await section('ollama', async () => {
  const ollama = new Ollama({ host: base, headers: { Authorization: 'Bearer sekret' } });
  const messages = [{ role: 'user', content: 'Tell me about a dog.' }];
  const options = { num_predict: 16, temperature: 0 };
  const r1 = await ollama.chat({ model, messages, options, stream: false });
  check('ollama: chat reply', r1.done === true && r1.message.role === 'assistant' && typeof r1.message.content === 'string' && r1.eval_count > 0, JSON.stringify(r1));
  let streamed = '';
  let last = null;
  for await (const part of await ollama.chat({ model, messages, options, stream: true })) {
    streamed += part.message.content;
    last = part;
  }
  check('ollama: streamed chat equals the whole one', streamed === r1.message.content && last?.done === true && last?.done_reason === r1.done_reason, JSON.stringify({ streamed, last }));
  messages.push(r1.message, { role: 'user', content: 'And then?' });
  const r2 = await ollama.chat({ model, messages, options: { num_predict: 8, temperature: 0 } , stream: false });
  check('ollama: second turn with the reply sent back', r2.prompt_eval_count > r1.prompt_eval_count, JSON.stringify(r2));
  // A tool call message and its result, as Ollama's clients send them back.
  const r3 = await ollama.chat({
    model, stream: false, options: { num_predict: 8 },
    tools: [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a place', parameters: weather } }],
    messages: [{ role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { location: 'Paris', unit: 'celsius' } } }] },
      { role: 'tool', content: '21 C, sunny', tool_name: 'get_weather' }],
  });
  check('ollama: tool call and result round trip', r3.done === true, JSON.stringify(r3));
  const s = await ollama.chat({ model, messages: [{ role: 'user', content: 'Describe a person.' }], format: person, options: { num_predict: 80, temperature: 1 }, stream: false });
  let parsed = null;
  try { parsed = JSON.parse(s.message.content); } catch {}
  check('ollama: format (a JSON Schema) validates', parsed !== null && validPerson(parsed), s.message.content);
  const g = await ollama.generate({ model, prompt: 'Once upon a time', options, stream: false });
  check('ollama: generate', typeof g.response === 'string' && g.done === true, JSON.stringify(g));
  let gs = '';
  for await (const part of await ollama.generate({ model, prompt: 'Once upon a time', options, stream: true })) gs += part.response;
  check('ollama: streamed generate equals the whole one', gs === g.response, JSON.stringify(gs));
  const list = await ollama.list();
  check('ollama: list names the model', list.models.some((m) => m.name === model), JSON.stringify(list));
  const ps = await ollama.ps();
  check('ollama: ps', ps.models.length === 1, JSON.stringify(ps));
  const show = await ollama.show({ model });
  check('ollama: show', Array.isArray(show.capabilities) && show.details.format === 'gguf', JSON.stringify(show).slice(0, 300));
  const emb = await ollama.embed({ model, input: ['a dog', 'a cat'] });
  check('ollama: embed', emb.embeddings.length === 2 && emb.embeddings[0].length > 0, JSON.stringify(emb).slice(0, 200));
  const e8 = await ollama.embed({ model, input: 'a dog', dimensions: 8 });
  const n8 = Math.sqrt(e8.embeddings[0].reduce((a, x) => a + x * x, 0));
  check('ollama: embed with dimensions (Matryoshka, normalized again)', e8.embeddings[0].length === 8 && Math.abs(n8 - 1) < 1e-5, JSON.stringify(e8).slice(0, 200));
  try {
    await ollama.chat({ model, messages: [{ role: 'user', content: 'x', images: ['AA=='] }], stream: false });
    check('ollama: an image is refused with an error', false, 'accepted');
  } catch (e) {
    check('ollama: an image is refused with an error', e.status_code === 400 && /image/.test(e.error ?? e.message), `${e.status_code} ${e.message}`);
  }
});

await section('ai-sdk', async () => {
  const provider = createOpenAICompatible({ name: 'paddock', baseURL: `${base}/v1`, apiKey: 'sekret', supportsStructuredOutputs: true });
  const m = provider(model);
  const messages = [{ role: 'user', content: 'Tell me about a dog.' }];
  const r1 = await generateText({ model: m, messages, maxOutputTokens: 16, temperature: 0, maxRetries: 0 });
  check('ai-sdk: generateText', typeof r1.text === 'string' && r1.text.length > 0, JSON.stringify(r1.text));
  const s = streamText({ model: m, messages, maxOutputTokens: 16, temperature: 0, maxRetries: 0 });
  let streamed = '';
  for await (const t of s.textStream) streamed += t;
  check('ai-sdk: streamText equals generateText', streamed === r1.text, JSON.stringify(streamed));
  messages.push(...r1.response.messages, { role: 'user', content: 'And then?' });
  const r2 = await generateText({ model: m, messages, maxOutputTokens: 8, temperature: 0, maxRetries: 0 });
  check('ai-sdk: second turn with the response messages sent back', r2.usage.inputTokens > r1.usage.inputTokens, JSON.stringify(r2.usage));
  const tools = { get_weather: tool({ description: 'Weather for a place', inputSchema: jsonSchema(weather) }) };
  const t = await generateText({ model: m, tools, toolChoice: { type: 'tool', toolName: 'get_weather' }, messages: [{ role: 'user', content: 'Weather in Paris?' }], maxOutputTokens: 100, maxRetries: 0 });
  const call = t.toolCalls[0];
  check('ai-sdk: forced tool call with valid input', call?.toolName === 'get_weather' && validWeather(call.input), JSON.stringify(t.toolCalls));
  const t2 = await generateText({
    model: m, tools, maxOutputTokens: 8, maxRetries: 0,
    messages: [{ role: 'user', content: 'Weather in Paris?' }, ...t.response.messages,
      { role: 'tool', content: [{ type: 'tool-result', toolCallId: call.toolCallId, toolName: 'get_weather', output: { type: 'text', value: '21 C, sunny' } }] }],
  });
  check('ai-sdk: tool result round trip', typeof t2.text === 'string', JSON.stringify(t2.text));
  const o = await generateObject({ model: m, schema: z.object({ name: z.string().max(20), age: z.number().int().min(0).max(120) }), prompt: 'Describe a person.', maxOutputTokens: 80, maxRetries: 0 });
  check('ai-sdk: generateObject validates', validPerson(o.object), JSON.stringify(o.object));
});

await section('langchain', async () => {
  const llm = new ChatOpenAI({ model, apiKey: 'sekret', configuration: { baseURL: `${base}/v1` }, temperature: 0, maxTokens: 16, maxRetries: 0 });
  const history = [new SystemMessage('You tell stories.'), new HumanMessage('Tell me about a dog.')];
  const a1 = await llm.invoke(history);
  check('langchain: invoke', typeof a1.content === 'string' && a1.content.length > 0, JSON.stringify(a1.content));
  let streamed = '';
  for await (const chunk of await llm.stream(history)) streamed += chunk.content;
  check('langchain: stream equals invoke', streamed === a1.content, JSON.stringify(streamed));
  history.push(a1, new HumanMessage('And then?'));
  const a2 = await llm.invoke(history);
  check('langchain: second turn with the AIMessage sent back', typeof a2.content === 'string', JSON.stringify(a2.content));
  const withTools = llm.bindTools([{ type: 'function', function: { name: 'get_weather', description: 'Weather for a place', parameters: weather } }], { tool_choice: 'get_weather' });
  const llmLong = new ChatOpenAI({ model, apiKey: 'sekret', configuration: { baseURL: `${base}/v1` }, temperature: 1, maxTokens: 100, maxRetries: 0 });
  const t = await llmLong.bindTools([{ type: 'function', function: { name: 'get_weather', description: 'Weather for a place', parameters: weather } }], { tool_choice: 'get_weather' }).invoke([new HumanMessage('Weather in Paris?')]);
  const call = t.tool_calls?.[0];
  check('langchain: forced tool call with valid args', call?.name === 'get_weather' && validWeather(call.args), JSON.stringify(t.tool_calls));
  const t2 = await withTools.invoke([new HumanMessage('Weather in Paris?'), t, new ToolMessage({ tool_call_id: call.id, content: '21 C, sunny' })]);
  check('langchain: tool result round trip', typeof t2.content === 'string' && t2.usage_metadata?.input_tokens > 0, JSON.stringify(t2.usage_metadata));
  const structured = llmLong.withStructuredOutput(z.object({ name: z.string().max(20), age: z.number().int().min(0).max(120) }), { method: 'jsonSchema', name: 'person' });
  const p = await structured.invoke([new HumanMessage('Describe a person.')]);
  check('langchain: withStructuredOutput validates', validPerson(p), JSON.stringify(p));
});

await section('openai-v4', async () => {
  const client = new OpenAI4({ baseURL: `${base}/v1`, apiKey: 'sekret', maxRetries: 0 });
  const messages = [{ role: 'user', content: 'Tell me about a dog.' }];
  const r1 = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
  let streamed = '';
  for await (const c of await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0, stream: true })) streamed += c.choices[0]?.delta?.content ?? '';
  check('openai v4: stream equals the whole reply', streamed === r1.choices[0].message.content, JSON.stringify(streamed));
  messages.push(r1.choices[0].message, { role: 'user', content: 'And then?' });
  const r2 = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
  check('openai v4: second turn with the message sent back', r2.usage.prompt_tokens > r1.usage.prompt_tokens, JSON.stringify(r2.usage));
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a place', parameters: weather } }];
  const t = await client.chat.completions.create({ model, tools, tool_choice: 'required', max_tokens: 100, messages: [{ role: 'user', content: 'Weather in Paris?' }] });
  const call = t.choices[0].message.tool_calls?.[0];
  check('openai v4: forced tool call with valid arguments', call && validWeather(JSON.parse(call.function.arguments)), JSON.stringify(t.choices[0].message));
  const t2 = await client.chat.completions.create({ model, tools, max_tokens: 8, messages: [{ role: 'user', content: 'Weather in Paris?' }, t.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '21 C' }] });
  check('openai v4: tool result round trip', t2.choices.length === 1, '');
  const s = await client.chat.completions.create({ model, max_tokens: 80, messages: [{ role: 'user', content: 'Describe a person.' }], response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } } });
  let parsed = null;
  try { parsed = JSON.parse(s.choices[0].message.content); } catch {}
  check('openai v4: structured output validates', parsed !== null && validPerson(parsed), s.choices[0].message.content);
});

process.exit(failures === 0 ? 0 : 1);
