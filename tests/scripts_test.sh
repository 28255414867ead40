#!/usr/bin/env bash
# The test stages of scripts/test fail when they run no test: run_ctest (scripts/common.sh)
# on a build folder without tests, with one passing test and with one failing test.
set -u
source "$(dirname "$0")/../scripts/common.sh"
source "$(dirname "$0")/lib.sh"
tmp=$TMP
expect() {  # expect WANT(pass|fail) NAME DIR
  local rc=0 got=pass
  run_ctest "$3" "$tmp/log" >/dev/null 2>&1 || rc=$?
  [ $rc -eq 0 ] || got=fail
  expect_eq "$2: the stage's outcome" "$got" "$1"
}
mkdir -p "$tmp/none" "$tmp/empty" "$tmp/pass" "$tmp/failing"
expect fail "a folder CTest finds nothing in" "$tmp/none"
echo '# no add_test' >"$tmp/empty/CTestTestfile.cmake"
expect fail "a configured build with zero tests" "$tmp/empty"
echo 'add_test(ok "/bin/true")' >"$tmp/pass/CTestTestfile.cmake"
expect pass "one passing test" "$tmp/pass"
printf 'add_test(ok "/bin/true")\nadd_test(bad "/bin/false")\n' >"$tmp/failing/CTestTestfile.cmake"
expect fail "one failing test" "$tmp/failing"
finish scripts
