#!/usr/bin/env bash
# Runs eventide's benchmarks from a finished build and writes the results table.
#
#   scripts/bench.sh <build-dir>        (make bench builds first; this builds nothing)
#   EVENTIDE_BENCH_QUICK=1 scripts/bench.sh <build-dir>     a ~15 s run instead of ~1 min
#
# Writes <build-dir>/bench/results.json (raw, with the rows) and results.md (ours beside
# each anchor, measured in this run), and prints the table. The outputs of the benchmark
# binaries stay beside them (calls.json, latency.json, matmul*.json).
set -euo pipefail

build=${1:?usage: scripts/bench.sh <build-dir>}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir="$build/bench"
for exe in eventide_bench_calls eventide_bench_latency eventide_bench_matmul; do
  if [[ ! -x "$dir/$exe" ]]; then
    echo "bench.sh: $dir/$exe is not built (configure with -DEVENTIDE_BUILD_BENCHMARKS=ON" \
         "and build first, or run make bench)" >&2
    exit 1
  fi
done

quick=0
case "${EVENTIDE_BENCH_QUICK:-0}" in 0 | "") ;; *) quick=1 ;; esac
if [[ $quick == 1 ]]; then
  # One repetition, short timing windows: enough to see a regression, not to quote.
  gbench_args=(--benchmark_min_time=0.05)
  latency_args=(--quick)
  matmul_args=(--quick)
  report_args=(--quick)
else
  # Five repetitions of each, interleaved at random with the others and read as their
  # median, so that a burst of other work on a shared machine falls on ours and the anchor
  # alike instead of on whichever ran at the time.
  gbench_args=(--benchmark_min_time=0.15 --benchmark_repetitions=5
               --benchmark_enable_random_interleaving=true
               --benchmark_display_aggregates_only=true)
  latency_args=()
  matmul_args=()
  report_args=()
fi

# How much of the machine other processes took during the run: busy CPU time of the whole
# machine (/proc/stat, steal included) minus this script's children (/proc/$$/stat), in
# clock ticks. The table says so when the run was shared.
machine_busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
own_ticks() { awk '{print $16 + $17}' "/proc/$$/stat"; }
busy_before=$(machine_busy_ticks)
own_before=$(own_ticks)
start_s=$(date +%s.%N)

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ $(cut -d' ' -f1 /proc/loadavg | cut -d. -f1) -ge 1 ]]; then
  echo "bench.sh: load average is $load_before: other work is running, numbers will be noisy" >&2
fi

# The wake-up latencies first: they are the figures another process disturbs most.
"$dir/eventide_bench_latency" "${latency_args[@]}" --out="$dir/latency.json"
echo
"$dir/eventide_bench_calls" "${gbench_args[@]}" \
  --benchmark_out="$dir/calls.json" --benchmark_out_format=json
echo

# OpenBLAS (DYNAMIC_ARCH) picks its kernels by CPU model, and falls back to old SSE3 ones
# ("Prescott") on a model it does not know: several times slower. matmul runs a second time
# with the kernels this CPU's instruction set allows, so the table shows both.
"$dir/eventide_bench_matmul" "${matmul_args[@]}" --out="$dir/matmul.json"
blas_core=
if grep -qw avx512f /proc/cpuinfo; then
  blas_core=SkylakeX
elif grep -qw avx2 /proc/cpuinfo; then
  blas_core=Haswell
fi
rm -f "$dir/matmul_blas_core.json"
if [[ -n $blas_core && -z ${OPENBLAS_CORETYPE:-} ]]; then
  OPENBLAS_CORETYPE=$blas_core "$dir/eventide_bench_matmul" "${matmul_args[@]}" \
    --out="$dir/matmul_blas_core.json"
  report_args+=(--matmul-blas-core "$dir/matmul_blas_core.json")
fi
echo
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
others=$(awk -v busy="$(( $(machine_busy_ticks) - busy_before ))" \
             -v own="$(( $(own_ticks) - own_before ))" -v hz="$(getconf CLK_TCK)" \
             -v start="$start_s" -v end="$(date +%s.%N)" -v cpus="$(nproc)" \
             'BEGIN { x = (busy - own) / hz / ((end - start) * cpus); printf "%.3f", x < 0 ? 0 : x }')

/usr/bin/python3 "$here/bench/report.py" "${report_args[@]}" \
  --calls "$dir/calls.json" --latency "$dir/latency.json" --matmul "$dir/matmul.json" \
  --json "$dir/results.json" --md "$dir/results.md" \
  --load-before "$load_before" --load-after "$load_after" --others "$others"

# The Python API's per-call costs (beside torch.cuda.Event where there is a GPU), when the
# build has the Python package.
if [[ -d "$build/python/eventide" ]]; then
  echo
  py_args=(--json "$dir/python.json" --md "$dir/python.md")
  [[ $quick == 1 ]] && py_args+=(--quick)
  [[ -n ${EVENTIDE_BENCH_DEVICE:-} ]] && py_args+=(--device "$EVENTIDE_BENCH_DEVICE")
  PYTHONPATH="$build/python" "${PYTHON:-/usr/bin/python3}" "$here/bench/python_bench.py" "${py_args[@]}"
  { echo; echo "## Python"; echo; cat "$dir/python.md"; } >> "$dir/results.md"
fi
echo
echo "bench.sh: wrote $dir/results.md and $dir/results.json"
