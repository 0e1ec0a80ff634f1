#!/usr/bin/env bash
# run.sh [SECONDS]: bounded libFuzzer run of the fuzz targets (default 60 s in total):
# build/fuzz/fuzz_envelope (client frames, stateless) for 2/5 of SECONDS, then
# build/fuzz/fuzz_batch (the daemon's write path over a real RocksDB store) for 2/5, then
# build/fuzz/fuzz_q1 (Q1 statements: parser and alias mapping) for the rest.
# Wall time is SECONDS plus a few seconds of start-up and shutdown (build time aside).
#
# Builds the fuzzers if needed (tests/fuzz/fuzz.mk), writes both seed corpora with
# build/fuzz/seedgen, adds any checked-in inputs (tests/fuzz/corpus/ for fuzz_envelope,
# tests/fuzz/corpus-batch/ for fuzz_batch, tests/fuzz/corpus-q1/ (the only seeds of
# fuzz_q1: statement text); e.g. reproducers of fixed bugs), and fuzzes
# copies of all that in a temporary directory, so the working tree is never touched.
# fuzz_batch keeps its store in a temporary directory under /dev/shm (else under TMPDIR),
# removed on exit even when the fuzzer dies. A crash, leak, UB report, violated property
# or timeout leaves its input in build/fuzz/artifacts/ and makes this script exit non-zero
# (after both targets ran), printing the command that reproduces it.
set -u
secs=${1:-60}
cd "$(dirname "$0")/../.."

make --no-print-directory -f tests/fuzz/fuzz.mk >/dev/null || { echo "fuzz: build failed"; exit 2; }

# libFuzzer reads -max_total_time=0 as "no limit": each target gets at least 1 s.
first=$(( secs * 2 / 5 )); [ "$first" -lt 1 ] && first=1
second=$(( secs * 2 / 5 )); [ "$second" -lt 1 ] && second=1
third=$(( secs - first - second )); [ "$third" -lt 1 ] && third=1

work=$(mktemp -d "${TMPDIR:-/tmp}/keyload-fuzz.XXXXXX")
shm=/dev/shm
[ -d "$shm" ] && [ -w "$shm" ] || shm=${TMPDIR:-/tmp}
store_root=$(mktemp -d "$shm/keyload-fuzz-run.XXXXXX")
trap 'rm -rf "$work" "$store_root"' EXIT
mkdir -p "$work/corpus-envelope" "$work/corpus-batch" "$work/corpus-q1" build/fuzz/artifacts
build/fuzz/seedgen "$work/corpus-envelope" "$work/corpus-batch" >/dev/null ||
  { echo "fuzz: seed generation failed"; exit 2; }
for pair in corpus:corpus-envelope corpus-batch:corpus-batch corpus-q1:corpus-q1; do
  src=tests/fuzz/${pair%%:*} dst=$work/${pair##*:}
  if [ -d "$src" ]; then
    find "$src" -maxdepth 1 -type f ! -name '.*' ! -name '*.md' -exec cp {} "$dst/" \;
  fi
done

failed=0
# run_target NAME SECONDS CORPUS ARTIFACT_PREFIX [libFuzzer flags...]
run_target() {
  local name=$1 t=$2 corpus=$3 prefix=$4
  shift 4
  local seeds log rc
  seeds=$(find "$corpus" -type f | wc -l)
  echo "fuzz: $name for ${t}s from $seeds seeds"
  log="$work/$name.log"
  KL_FUZZ_STORE_ROOT="$store_root" \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build/fuzz/$name" "$corpus" "$@" \
      -max_total_time="$t" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
      -print_final_stats=1 -artifact_prefix="$prefix" >"$log" 2>&1
  rc=$?

  local runs speed peak cov ft corp arts
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  peak=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1)
  corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1)
  echo "fuzz: $name: ${runs:-?} runs (${speed:-?}/s), ${cov:-cov: ?}, ${ft:-ft: ?}," \
       "${corp:-corp: ?} inputs, peak RSS ${peak:-?} MB"

  if [ $rc -ne 0 ]; then
    echo "fuzz: $name FAILED (exit $rc). Fuzzer output (last 60 lines):"
    tail -n 60 "$log"
    arts=$(sed -n 's/.*Test unit written to //p' "$log" | sort -u | tr '\n' ' ')
    [ -n "$arts" ] && echo "fuzz: reproduce with: build/fuzz/$name $arts"
    failed=1
    return
  fi
  echo "fuzz: $name: no crash, leak, UB or violated property found"
}

dict_env=() dict_batch=() dict_q1=()
[ -f tests/fuzz/envelope.dict ] && dict_env=(-dict=tests/fuzz/envelope.dict)
[ -f tests/fuzz/batch.dict ] && dict_batch=(-dict=tests/fuzz/batch.dict)
[ -f tests/fuzz/q1.dict ] && dict_q1=(-dict=tests/fuzz/q1.dict)
run_target fuzz_envelope "$first" "$work/corpus-envelope" build/fuzz/artifacts/ "${dict_env[@]}"
run_target fuzz_batch "$second" "$work/corpus-batch" build/fuzz/artifacts/batch- "${dict_batch[@]}"
run_target fuzz_q1 "$third" "$work/corpus-q1" build/fuzz/artifacts/q1- "${dict_q1[@]}"
exit $failed
