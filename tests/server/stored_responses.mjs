// Stored responses across a server restart, with the official OpenAI client (npm "openai"):
//   node stored_responses.mjs PORT MODEL create            -> prints the new response's id
//   node stored_responses.mjs PORT MODEL continue ID       -> continues it by previous_response_id
//   node stored_responses.mjs PORT MODEL get ID...         -> each id must be stored
//   node stored_responses.mjs PORT MODEL burst N           -> N stored responses at once; prints
//                                                             each id the moment it is answered
// Exit code 0 when every check passed.
import OpenAI from 'openai';

const [port, model, action, ...rest] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
let failures = 0;
function check(name, ok, detail = '') {
  console.error(`${ok ? 'ok  ' : 'FAIL'} stored-responses: ${name}${ok ? '' : ' ' + detail}`);
  if (!ok) failures++;
}

if (action === 'create') {
  const r = await client.responses.create({ model, input: 'Tell me about a cat.', max_output_tokens: 12, temperature: 0 });
  check('a stored response has an id and text', r.id.startsWith('resp') && r.output_text.length > 0, JSON.stringify(r.id));
  console.log(r.id);
} else if (action === 'continue') {
  const [id] = rest;
  const before = await client.responses.retrieve(id);
  check('GET finds the response stored before the restart', before.id === id, JSON.stringify(before.id));
  const c = await client.responses.create({ model, previous_response_id: id, input: 'And then?', max_output_tokens: 8, temperature: 0 });
  // The same conversation sent whole: the stored one was continued, not a fresh start.
  const whole = await client.responses.create({
    model,
    store: false,
    input: [{ role: 'user', content: 'Tell me about a cat.' }, { role: 'assistant', content: before.output_text }, { role: 'user', content: 'And then?' }],
    max_output_tokens: 8,
    temperature: 0,
  });
  check('previous_response_id continues the stored conversation after a restart', c.usage.input_tokens === whole.usage.input_tokens && c.output_text === whole.output_text, JSON.stringify({ c: c.usage, whole: whole.usage }));
  const del = await client.responses.delete(c.id).then(() => true, () => false);
  check('DELETE removes a stored response', del);
  const gone = await client.responses.retrieve(c.id).then(() => false, (e) => e.status === 404);
  check('a deleted response is a 404', gone);
} else if (action === 'get') {
  for (const id of rest) {
    const r = await client.responses.retrieve(id).then((x) => x, (e) => ({ error: e.status }));
    check(`answered before the kill, stored after it: ${id}`, r.id === id, JSON.stringify(r));
  }
} else if (action === 'burst') {
  const n = Number(rest[0]);
  await Promise.allSettled(Array.from({ length: n }, (_, i) =>
    client.responses.create({ model, input: `Story number ${i}.`, max_output_tokens: 64, temperature: 0 })
      .then((r) => console.log(r.id))));
  process.exit(0);  // (the server is killed mid-burst: the others fail, as they should)
} else {
  console.error(`unknown action '${action}'`);
  process.exit(2);
}
process.exit(failures === 0 ? 0 : 1);
