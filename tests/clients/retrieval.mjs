// Retrieval on one server (`paddock serve --models-dir` holding a chat model, a BERT embedding
// model and a BERT reranker): the official OpenAI client's embeddings (float, base64,
// `dimensions`), LangChain's OpenAIEmbeddings, Ollama's embed, Cohere's SDK's rerank (/v2/rerank),
// rerank calls in Jina's (/v1/rerank) and Cohere's shapes, then a small retrieval: 200 passages embedded,
// a query's nearest neighbours ranked, the top 20 reranked. Bad input: an empty string, an
// input over the context with and without truncation, 10,000 inputs, a reranker asked for
// embeddings, an embedding model asked to chat.
// usage: node retrieval.mjs PORT CHAT_MODEL EMBED_MODEL RERANK_MODEL
import OpenAI from 'openai';
import { OpenAIEmbeddings } from '@langchain/openai';
import { Ollama } from 'ollama';
import { CohereClientV2 } from 'cohere-ai';

const [port, chat, embedModel, rerankModel] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} retrieval: ${name}${ok ? '' : ' ' + detail}`);
  if (!ok) failures++;
}
async function section(name, fn) {
  try {
    await fn();
  } catch (e) {
    check(`${name}: no exception`, false, (e?.stack ?? String(e)).slice(0, 1500));
  }
}
const post = async (path, body) => {
  const r = await fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
};
const norm = (v) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none' });
const words = 'the capital of france is paris it lies on the river and is known for its museums memory engine search query document passage answer question city school national university world time years state first new after during known united'.split(' ');
let seed = 7;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const passages = Array.from({ length: 200 }, () => Array.from({ length: 12 + Math.floor(rand() * 40) }, () => words[Math.floor(rand() * words.length)]).join(' '));

await section('openai embeddings', async () => {
  const f = await openai.embeddings.create({ model: embedModel, input: ['hello world', 'the capital of france'] });
  check('openai: float vectors, unit length', f.data.length === 2 && Math.abs(norm(f.data[0].embedding) - 1) < 1e-4, JSON.stringify(f).slice(0, 200));
  const b = await openai.embeddings.create({ model: embedModel, input: ['hello world', 'the capital of france'], encoding_format: 'base64' });
  // (The client returns the base64 string as sent when it is asked for explicitly.)
  const decode = (s) => { const b = Buffer.from(s, 'base64'); return Array.from(new Float32Array(b.buffer, b.byteOffset, b.length / 4)); };
  const same = b.data.every((d, i) => { const v = decode(d.embedding); return v.length === f.data[i].embedding.length && v.every((x, k) => Math.abs(x - f.data[i].embedding[k]) < 1e-6); });
  check('openai: base64 decodes to the float vectors', same, JSON.stringify(b.data[0]).slice(0, 100));
  const d = await openai.embeddings.create({ model: embedModel, input: 'hello world', dimensions: 16 });
  const first = f.data[0].embedding.slice(0, 16), n = norm(first);
  check('openai: dimensions 16 = the first 16 components renormalized', d.data[0].embedding.length === 16 && d.data[0].embedding.every((x, k) => Math.abs(x - first[k] / n) < 1e-5));
});

await section('langchain embeddings', async () => {
  const lc = new OpenAIEmbeddings({ model: embedModel, apiKey: 'none', configuration: { baseURL: `${base}/v1` } });
  const docs = await lc.embedDocuments(['hello world', 'a memory engine']);
  const q = await lc.embedQuery('hello world');
  check('langchain: embedDocuments and embedQuery agree', docs.length === 2 && Math.abs(dot(docs[0], q) - 1) < 1e-4, JSON.stringify(q).slice(0, 100));
});

await section('ollama embed', async () => {
  const ollama = new Ollama({ host: base });
  const e = await ollama.embed({ model: embedModel, input: ['hello world', 'a memory engine'] });
  check('ollama: embed with an encoder', e.embeddings.length === 2 && Math.abs(norm(e.embeddings[0]) - 1) < 1e-4, JSON.stringify(e).slice(0, 200));
});

await section('rerank shapes', async () => {
  const docs = ['paris is the capital of france', 'the river flows', { text: 'hello world' }];
  const j = await post('/v1/rerank', { model: rerankModel, query: 'what is the capital of france', documents: docs, top_n: 2 });
  const ok = j.status === 200 && j.body.results.length === 2 && j.body.results[0].relevance_score >= j.body.results[1].relevance_score && typeof j.body.results[0].document?.text === 'string' && j.body.usage.total_tokens > 0;
  check("rerank: Jina's shape (/v1/rerank, top_n, documents returned)", ok, JSON.stringify(j));
  const c = await post('/v2/rerank', { model: rerankModel, query: 'what is the capital of france', documents: docs, return_documents: true });
  const inUnit = c.body.results?.every((r) => r.relevance_score > 0 && r.relevance_score < 1);
  check("rerank: Cohere's shape (/v2/rerank: id, results in [0, 1], meta)", c.status === 200 && c.body.results.length === 3 && inUnit && typeof c.body.id === 'string' && c.body.meta?.billed_units?.search_units === 1 && c.body.results[0].document.text.length > 0, JSON.stringify(c));
  const l = await post('/rerank', { model: rerankModel, query: 'what is the capital of france', documents: docs });
  const byIndex = Object.fromEntries(j.body.results.map((r) => [r.index, r.relevance_score]));
  check('rerank: /rerank answers as /v1/rerank', l.status === 200 && l.body.results.filter((r) => r.index in byIndex).every((r) => Math.abs(r.relevance_score - byIndex[r.index]) < 1e-6), JSON.stringify(l));
});

await section('cohere sdk', async () => {
  const cohere = new CohereClientV2({ token: 'none', environment: base });
  const r = await cohere.rerank({ model: rerankModel, query: 'what is the capital of france', documents: ['paris is the capital of france', 'the river flows', 'hello world'], topN: 2 });
  const ok = r.results.length === 2 && r.results[0].relevanceScore >= r.results[1].relevanceScore && r.results.every((x) => x.relevanceScore > 0 && x.relevanceScore < 1) && typeof r.id === 'string';
  check("cohere-ai: CohereClientV2.rerank (Cohere's /v2/rerank)", ok, JSON.stringify(r));
});

await section('retrieval', async () => {
  const e = await openai.embeddings.create({ model: embedModel, input: passages });
  check('retrieval: 200 passages embedded in one request', e.data.length === 200 && e.data.every((d, i) => d.index === i));
  const target = 137;
  const q = (await openai.embeddings.create({ model: embedModel, input: passages[target] })).data[0].embedding;
  const ranked = e.data.map((d) => ({ i: d.index, s: dot(d.embedding, q) })).sort((a, b) => b.s - a.s);
  check('retrieval: the passage itself is the nearest neighbour (cosine 1)', ranked[0].i === target && Math.abs(ranked[0].s - 1) < 1e-4, JSON.stringify(ranked.slice(0, 3)));
  const top = ranked.slice(0, 20);
  const r = await post('/v1/rerank', { model: rerankModel, query: passages[target], documents: top.map((t) => passages[t.i]), top_n: 5 });
  const sorted = r.body.results?.every((x, k, a) => k === 0 || a[k - 1].relevance_score >= x.relevance_score);
  check('retrieval: the top 20 reranked, 5 best back in order', r.status === 200 && r.body.results.length === 5 && sorted && r.body.results.every((x) => x.index >= 0 && x.index < 20), JSON.stringify(r.body).slice(0, 300));
});

await section('bad input', async () => {
  const empty = await post('/v1/embeddings', { model: embedModel, input: '' });
  check('bad input: an empty string is a 400', empty.status === 400 && /empty/.test(empty.body.error?.message), JSON.stringify(empty));
  const long = 'word '.repeat(400);
  const over = await post('/v1/embeddings', { model: embedModel, input: long });
  check('bad input: over the context is a 400 naming it', over.status === 400 && over.body.error?.code === 'context_length_exceeded' && /context of \d+/.test(over.body.error.message), JSON.stringify(over));
  const cut = await post('/v1/embeddings', { model: embedModel, input: long, truncate: true });
  check('bad input: truncate: true embeds the first tokens', cut.status === 200 && cut.body.data[0].embedding.length > 0);
  const many = await post('/v1/embeddings', { model: embedModel, input: Array(10000).fill('x') });
  check('bad input: 10,000 inputs is a 400 naming the limit', many.status === 400 && /2048/.test(many.body.error?.message), JSON.stringify(many).slice(0, 300));
  const rr = await post('/v1/embeddings', { model: rerankModel, input: 'hello' });
  check('bad input: a reranker asked for embeddings is a 400 naming it', rr.status === 400 && rr.body.error.message.includes(rerankModel) && /reranker/.test(rr.body.error.message), JSON.stringify(rr));
  const ch = await post('/v1/chat/completions', { model: embedModel, messages: [{ role: 'user', content: 'hi' }] });
  check('bad input: an embedding model asked to chat is a 400 naming it', ch.status === 400 && ch.body.error.message.includes(embedModel) && /embedding model/.test(ch.body.error.message), JSON.stringify(ch));
  const er = await post('/v1/rerank', { model: embedModel, query: 'q', documents: ['d'] });
  check('bad input: an embedding model asked to rerank is a 400 naming it', er.status === 400 && er.body.error.message.includes(embedModel), JSON.stringify(er));
  const cr = await post('/v1/rerank', { model: chat, query: 'q', documents: ['d'] });
  check('bad input: a chat model asked to rerank is a 400', cr.status === 400, JSON.stringify(cr));
  const nd = await post('/v1/rerank', { model: rerankModel, query: 'q', documents: [] });
  check('bad input: no documents is a 400', nd.status === 400 && nd.body.error.param === 'documents', JSON.stringify(nd));
  const c = await openai.chat.completions.create({ model: chat, messages: [{ role: 'user', content: 'Once upon' }], max_tokens: 4 });
  check('the chat model beside them still chats', c.choices[0].message.content.length > 0);
});

console.log(failures ? `retrieval: ${failures} failed` : 'retrieval: all passed');
process.exit(failures ? 1 : 0);
