#!/usr/bin/env bash
# The test stages of scripts/test fail when they run no test: run_ctest (scripts/common.sh)
# on a build folder without tests, with one passing test and with one failing test.
set -u
source "$(dirname "$0")/../scripts/common.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect WANT(pass|fail) NAME DIR
  local rc=0
  run_ctest "$3" "$tmp/log" >/dev/null 2>&1 || rc=$?
  if { [ "$1" = pass ] && [ $rc -ne 0 ]; } || { [ "$1" = fail ] && [ $rc -eq 0 ]; }; then
    echo "FAIL: $2: expected the stage to $1 (exit $rc)"
    fail=1
  else
    echo "ok: $2"
  fi
}
mkdir -p "$tmp/none" "$tmp/empty" "$tmp/pass" "$tmp/failing"
expect fail "a folder CTest finds nothing in" "$tmp/none"
echo '# no add_test' >"$tmp/empty/CTestTestfile.cmake"
expect fail "a configured build with zero tests" "$tmp/empty"
echo 'add_test(ok "/bin/true")' >"$tmp/pass/CTestTestfile.cmake"
expect pass "one passing test" "$tmp/pass"
printf 'add_test(ok "/bin/true")\nadd_test(bad "/bin/false")\n' >"$tmp/failing/CTestTestfile.cmake"
expect fail "one failing test" "$tmp/failing"
exit $fail
