#!/usr/bin/env bash
# Runs every StateLens fuzzer for SECONDS each and fails when any finds a crash, leak, timeout or OOM.
#   tests/fuzz/run_fuzzers.sh BUILD_DIR SECONDS [FUZZER ...]
# BUILD_DIR is a `fuzz` preset build (cmake --preset fuzz && cmake --build --preset fuzz).
#
# Seed corpora are made fresh on every run (make_corpus.py) from synthetic seeds, tests/fixtures/** and
# ../shared/fixtures/real/** (or $STATELENS_SHARED_DIR/fixtures/real) when present; they are never copied
# into the repository. What each fuzzer discovers is kept in BUILD_DIR/fuzz/corpus/<fuzzer> so later runs
# start from it; crashing inputs land in BUILD_DIR/fuzz/artifacts/<fuzzer>/ and logs in BUILD_DIR/fuzz/logs/.
# FUZZ_JOBS (default: the number of cores) fuzzers run at once.
set -uo pipefail

if [ $# -lt 2 ]; then
    sed -n '2,3p' "$0"
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd) || { echo "run_fuzzers: no build directory $1" >&2; exit 2; }
seconds=$2
shift 2

all=(fuzz_safetensors fuzz_torch_zip fuzz_torch_legacy fuzz_tar fuzz_pickle fuzz_hf_index fuzz_hf_index_folder fuzz_dcp fuzz_rules fuzz_values)
fuzzers=("${@:-${all[@]}}")
[ $# -eq 0 ] && fuzzers=("${all[@]}")

# -max_len per format: large enough for a small real file of that kind, small enough to stay fast.
max_len() {
    case $1 in
        fuzz_safetensors | fuzz_pickle | fuzz_hf_index | fuzz_rules) echo 65536 ;;
        *) echo 131072 ;;
    esac
}
dict_for() {
    case $1 in
        fuzz_pickle | fuzz_torch_legacy | fuzz_tar | fuzz_dcp) echo "$here/pickle.dict" ;;
        fuzz_torch_zip | fuzz_values) echo "$here/torch_zip.dict" ;;
        fuzz_safetensors | fuzz_hf_index | fuzz_hf_index_folder | fuzz_rules) echo "$here/json.dict" ;;
    esac
}

out="$build/fuzz"
seeds="$out/seeds"
mkdir -p "$out/corpus" "$out/artifacts" "$out/logs"
rm -rf "$seeds"
shared="${STATELENS_SHARED_DIR:-$repo/../shared}/fixtures/real"
python=/usr/bin/python3
[ -x "$python" ] || python=python3
"$python" "$here/make_corpus.py" "$seeds" "$repo/tests/fixtures" "$shared" || { echo "run_fuzzers: making the seed corpora failed" >&2; exit 1; }

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1:suppressions=$here/ubsan.supp}"

run_one() {
    local f=$1
    local bin="$build/tests/fuzz/$f"
    local log="$out/logs/$f.log"
    if [ ! -x "$bin" ]; then
        echo "run_fuzzers: $bin is missing (build the fuzz preset first)" >&2
        return 1
    fi
    mkdir -p "$out/corpus/$f" "$out/artifacts/$f"
    local dict
    dict=$(dict_for "$f")
    local args=(-max_total_time="$seconds" -max_len="$(max_len "$f")" -rss_limit_mb=2048 -malloc_limit_mb=2048
        -timeout=10 -print_final_stats=1 -artifact_prefix="$out/artifacts/$f/")
    [ -n "$dict" ] && [ -f "$dict" ] && args+=(-dict="$dict")
    "$bin" "${args[@]}" "$out/corpus/$f" "$seeds/$f" >"$log" 2>&1
    local rc=$?
    local execs
    execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    if [ $rc -ne 0 ] || ls "$out/artifacts/$f" | grep -qE '^(crash|leak|timeout|oom|slow-unit)-'; then
        echo "FAIL $f (exit $rc); log: $log"
        grep -E 'ERROR:|SUMMARY:|\*\*\* fuzz target|runtime error|Test unit written' "$log" | head -8 | sed 's/^/    /'
        return 1
    fi
    echo "ok   $f: ${execs:-?} runs in ${seconds}s, corpus $(ls "$out/corpus/$f" | wc -l)"
}

# Leftovers of earlier runs would fail this one: only new findings count.
for f in "${fuzzers[@]}"; do
    rm -f "$out/artifacts/$f"/crash-* "$out/artifacts/$f"/leak-* "$out/artifacts/$f"/timeout-* \
        "$out/artifacts/$f"/oom-* "$out/artifacts/$f"/slow-unit-* 2>/dev/null
done

jobs_max=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
status=0
names=()
results="$out/logs/results"
rm -rf "$results"
mkdir -p "$results"
for f in "${fuzzers[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
        wait -n
    done
    (run_one "$f" >"$results/$f" 2>&1) &
    names+=("$f")
done
wait
for f in "${names[@]}"; do
    cat "$results/$f"
    grep -q '^ok' "$results/$f" || status=1
done
if [ $status -ne 0 ]; then
    echo "run_fuzzers: a fuzzer found a problem; reproduce with BUILD_DIR/tests/fuzz/<fuzzer> <artifact>"
    exit 1
fi
echo "run_fuzzers: all ${#fuzzers[@]} fuzzers clean after ${seconds}s each"
