// Validates every manifest in deploy/kubernetes offline against the Kubernetes schemas
// (kubernetes-models: the official OpenAPI schemas, checked with ajv), and what the schemas
// cannot say: the probes hit Paddock's endpoints, the grace period outlasts --drain-seconds +
// --grace, the model is mounted read-only, the HPA targets the Deployment.
// usage: node validate.mjs DIR
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { Deployment } from 'kubernetes-models/apps/v1';
import { Service, ConfigMap } from 'kubernetes-models/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';

const kinds = {
  'apps/v1/Deployment': Deployment,
  'v1/Service': Service,
  'v1/ConfigMap': ConfigMap,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
};
let pass = 0;
let fail = 0;
const check = (name, ok, detail = '') => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} k8s: ${name}${ok ? '' : ' ' + detail}`);
  ok ? pass++ : fail++;
};

const dir = process.argv[2];
const objects = [];
for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.yaml')).sort()) {
  for (const doc of YAML.parseAllDocuments(fs.readFileSync(path.join(dir, f), 'utf8'))) {
    if (doc.errors.length) {
      check(`${f}: YAML parses`, false, doc.errors[0].message);
      continue;
    }
    const o = doc.toJS();
    const key = `${o.apiVersion}/${o.kind}`;
    const Model = kinds[key];
    if (!Model) {
      check(`${f}: ${key} is a kind this test knows`, false);
      continue;
    }
    try {
      new Model(o).validate();
      check(`${f}: ${o.kind} ${o.metadata.name} is valid`, true);
    } catch (e) {
      check(`${f}: ${o.kind} ${o.metadata.name} is valid`, false, e.message.slice(0, 500));
    }
    objects.push(o);
  }
}

const dep = objects.find((o) => o.kind === 'Deployment');
const c = dep.spec.template.spec.containers[0];
const arg = (name) => {
  const i = c.args.indexOf(name);
  return i >= 0 ? c.args[i + 1] : undefined;
};
check('readiness probe is GET /health', c.readinessProbe.httpGet.path === '/health');
check('liveness probe does not fail while loading or draining (/metrics)', c.livenessProbe.httpGet.path === '/metrics');
check('preStop hook present', !!c.lifecycle?.preStop);
const grace = Number(arg('--grace') ?? 30) + Number(arg('--drain-seconds') ?? 0) + 3;  // + preStop
check('terminationGracePeriodSeconds > preStop + --drain-seconds + --grace', dep.spec.template.spec.terminationGracePeriodSeconds > grace,
  `${dep.spec.template.spec.terminationGracePeriodSeconds} vs ${grace}`);
check('the model is mounted read-only', c.volumeMounts.every((m) => m.readOnly) &&
  dep.spec.template.spec.volumes.every((v) => !v.persistentVolumeClaim || v.persistentVolumeClaim.readOnly));
check('memory request <= limit', parseInt(c.resources.requests.memory) <= parseInt(c.resources.limits.memory));
check('--busy-status 503 (retried by balancers)', arg('--busy-status') === '503');
const hpa = objects.find((o) => o.kind === 'HorizontalPodAutoscaler');
check('HPA targets the Deployment', hpa.spec.scaleTargetRef.kind === 'Deployment' && hpa.spec.scaleTargetRef.name === dep.metadata.name);
const adapter = objects.find((o) => o.kind === 'ConfigMap');
check('HPA metric is the one the adapter exposes', adapter.data['config.yaml'].includes(hpa.spec.metrics[0].pods.metric.name));
const svc = objects.find((o) => o.kind === 'Service' && o.spec.clusterIP !== 'None');
check('Service selects the pods', Object.entries(svc.spec.selector).every(([k, v]) => dep.spec.template.metadata.labels[k] === v));

// A broken manifest must fail: the validator is not a rubber stamp.
try {
  new Deployment({ ...dep, spec: { ...dep.spec, replicas: 'two' } }).validate();
  check('an invalid Deployment is rejected', false);
} catch {
  check('an invalid Deployment is rejected', true);
}
console.log(`k8s: ${pass} passed, ${fail} failed`);
process.exit(fail ? 1 : 0);
