#!/usr/bin/env bash
# run.sh [SECONDS]: bounded libFuzzer run of build/fuzz/fuzz_envelope (default 60 s).
#
# Builds the fuzzer if needed (tests/fuzz/fuzz.mk), writes the seed corpus with
# build/fuzz/seedgen, adds any checked-in inputs from tests/fuzz/corpus/ (e.g. reproducers of
# fixed bugs), and fuzzes a copy of all that in a temporary directory, so the working tree is
# never touched. A crash, leak, UB report or timeout leaves its input in
# build/fuzz/artifacts/ and makes this script exit non-zero.
# Reproduce one input:  build/fuzz/fuzz_envelope build/fuzz/artifacts/crash-...
set -u
secs=${1:-60}
cd "$(dirname "$0")/../.."

make --no-print-directory -f tests/fuzz/fuzz.mk >/dev/null || { echo "fuzz: build failed"; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/keyload-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" build/fuzz/artifacts
build/fuzz/seedgen "$work/corpus" >/dev/null || { echo "fuzz: seed generation failed"; exit 2; }
if [ -d tests/fuzz/corpus ]; then
  find tests/fuzz/corpus -maxdepth 1 -type f ! -name '.*' ! -name '*.md' -exec cp {} "$work/corpus/" \;
fi
seeds=$(find "$work/corpus" -type f | wc -l)
dict=()
[ -f tests/fuzz/envelope.dict ] && dict=(-dict=tests/fuzz/envelope.dict)

echo "fuzz: fuzz_envelope for ${secs}s from $seeds seeds"
log="$work/fuzz.log"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  build/fuzz/fuzz_envelope "$work/corpus" "${dict[@]}" \
    -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
    -print_final_stats=1 -artifact_prefix=build/fuzz/artifacts/ >"$log" 2>&1
rc=$?

runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
peak=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1)
corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1)
echo "fuzz: ${runs:-?} runs (${speed:-?}/s), ${cov:-cov: ?}, ${ft:-ft: ?}, ${corp:-corp: ?} inputs, peak RSS ${peak:-?} MB"

if [ $rc -ne 0 ]; then
  echo "fuzz: FAILED (exit $rc). Fuzzer output (last 60 lines):"
  tail -n 60 "$log"
  arts=$(sed -n 's/.*Test unit written to //p' "$log" | sort -u | tr '\n' ' ')
  [ -n "$arts" ] && echo "fuzz: reproduce with: build/fuzz/fuzz_envelope $arts"
  exit 1
fi
echo "fuzz: no crash, leak or UB found"
