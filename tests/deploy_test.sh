#!/usr/bin/env bash
# deploy/ checked offline with the real tools: HAProxy parses deploy/haproxy/haproxy.cfg and the
# configuration scripts/cluster generates from it; promtool checks the Prometheus configuration
# and rules; the Kubernetes manifests validate against the Kubernetes schemas (node, pinned).
# usage: deploy_test.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
pass=0
fail=0
check() {  # check NAME COMMAND...
  local name=$1
  shift
  if out=$("$@" 2>&1); then
    pass=$((pass + 1))
    echo "ok   deploy: $name"
  else
    fail=$((fail + 1))
    echo "FAIL deploy: $name"
    echo "$out" | tail -n 5
  fi
}
check "haproxy.cfg is valid (haproxy -c)" haproxy -c -q -f "$ROOT/deploy/haproxy/haproxy.cfg"
check "prometheus.yml and its rule files are valid (promtool check config)" promtool check config "$ROOT/deploy/prometheus/prometheus.yml"
check "recording and alert rules are valid (promtool check rules)" promtool check rules "$ROOT/deploy/prometheus/rules.yml" "$ROOT/deploy/prometheus/alerts.yml"
check "alert rules fire as their unit tests say (promtool test rules)" promtool test rules "$ROOT/deploy/prometheus/alerts_test.yml"
if out=$(cd "$HERE/deploy" && node validate.mjs "$ROOT/deploy/kubernetes" 2>&1); then
  pass=$((pass + 1))
  echo "$out" | grep -c '^ok' | xargs -I{} echo "ok   deploy: Kubernetes manifests ({} checks)"
else
  fail=$((fail + 1))
  echo "FAIL deploy: Kubernetes manifests"
  echo "$out" | grep FAIL
fi
echo "deploy: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
