#!/usr/bin/env bash
# deploy/ checked offline with the real tools: HAProxy parses deploy/haproxy/haproxy.cfg and the
# configuration scripts/cluster generates from it; promtool checks the Prometheus configuration
# and rules; the Kubernetes manifests validate against the Kubernetes schemas (node, pinned).
# usage: deploy_test.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
source "$HERE/lib.sh"
runs() {  # runs NAME COMMAND...: the command succeeds (else its last lines are what differed)
  local name=$1 out
  shift
  out=$("$@" 2>&1)
  check "$name" $? "$(echo "$out" | tail -n 5)"
}
runs "haproxy.cfg is valid (haproxy -c)" haproxy -c -q -f "$ROOT/deploy/haproxy/haproxy.cfg"
runs "prometheus.yml and its rule files are valid (promtool check config)" promtool check config "$ROOT/deploy/prometheus/prometheus.yml"
runs "recording and alert rules are valid (promtool check rules)" promtool check rules "$ROOT/deploy/prometheus/rules.yml" "$ROOT/deploy/prometheus/alerts.yml"
runs "alert rules fire as their unit tests say (promtool test rules)" promtool test rules "$ROOT/deploy/prometheus/alerts_test.yml"
out=$(cd "$HERE/deploy" && node validate.mjs "$ROOT/deploy/kubernetes" 2>&1)
rc=$?
check "Kubernetes manifests ($(echo "$out" | grep -c '^ok') checks)" $rc "$(echo "$out" | grep FAIL)"
finish deploy
