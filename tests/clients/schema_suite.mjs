// The official JSON-Schema-Test-Suite's schemas (npm json-schema-test-suite, draft 4: the one the
// registry carries) as structured-output requests: for every schema Paddock accepts, outputs
// sampled at temperature 1 must all validate (ajv-draft-04); every schema it refuses must be a
// 400 that names the keyword or the problem. Prints the counts per keyword file.
// usage: node schema_suite.mjs PORT MODEL [SAMPLES]
import Ajv from 'ajv-draft-04';
import { readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const [port, model, samplesArg] = process.argv.slice(2);
const samples = Number(samplesArg ?? 4);
const require = createRequire(import.meta.url);
const dir = join(dirname(require.resolve('json-schema-test-suite/package.json')), 'tests', 'draft4');
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
let failures = 0;
function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} schema-suite: ${name}${ok ? '' : ' ' + detail}`);
  if (!ok) failures++;
}

async function ask(schema) {
  const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: 'Bearer sekret' },
    body: JSON.stringify({
      model, n: samples, temperature: 1, top_p: 1, max_tokens: 200, seed: 7,
      messages: [{ role: 'user', content: 'Write a JSON value.' }],
      response_format: { type: 'json_schema', json_schema: { name: 's', schema } },
    }),
  });
  return { status: r.status, body: await r.json() };
}

const totals = { groups: 0, accepted: 0, refused: 0, outputs: 0, valid: 0 };
const rows = [];
for (const file of files) {
  const groups = JSON.parse(readFileSync(join(dir, file), 'utf8'));
  const row = { file, groups: groups.length, accepted: 0, refused: 0, outputs: 0, valid: 0, reasons: new Set() };
  for (const g of groups) {
    totals.groups++;
    const { status, body } = await ask(g.schema);
    if (status === 400) {
      const msg = body?.error?.message ?? '';
      // A refusal names what it refuses: a keyword in quotes, or the problem with the schema.
      const named = /'[^']+'|json schema: /.test(msg);
      check(`${file}: "${g.description}" refused with a reason`, named, msg);
      row.refused++;
      row.reasons.add(msg.replace(/^json schema: (#[^:]*: )?/, '').slice(0, 60));
      continue;
    }
    if (status !== 200) {
      check(`${file}: "${g.description}" answered`, false, `${status} ${JSON.stringify(body)}`);
      continue;
    }
    row.accepted++;
    let validate;
    try {
      validate = new Ajv({ strict: false, validateFormats: false }).compile(g.schema);
    } catch (e) {
      continue;  // (a schema ajv cannot compile, e.g. a remote $ref: not counted)
    }
    for (const c of body.choices) {
      row.outputs++;
      let v;
      try {
        v = JSON.parse(c.message.content);
      } catch {
        check(`${file}: "${g.description}" output parses`, false, JSON.stringify(c.message.content));
        continue;
      }
      const ok = validate(v);
      if (ok) row.valid++;
      else check(`${file}: "${g.description}" output validates`, false, `${c.message.content} ${JSON.stringify(validate.errors)}`);
    }
  }
  for (const k of ['accepted', 'refused', 'outputs', 'valid']) totals[k] += row[k];
  rows.push(row);
}
console.log('| keyword file | schemas | accepted | refused | outputs valid | refusals |');
console.log('|---|---|---|---|---|---|');
for (const r of rows)
  console.log(`| ${r.file} | ${r.groups} | ${r.accepted} | ${r.refused} | ${r.valid}/${r.outputs} | ${[...r.reasons].join('; ')} |`);
console.log(`| all | ${totals.groups} | ${totals.accepted} | ${totals.refused} | ${totals.valid}/${totals.outputs} | |`);
check(`every output of an accepted schema validates (${totals.valid}/${totals.outputs})`, totals.valid === totals.outputs && totals.outputs > 0);
process.exit(failures === 0 ? 0 : 1);
