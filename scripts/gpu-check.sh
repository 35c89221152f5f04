#!/usr/bin/env bash
# Everything about the CUDA backend, in one go, on a machine with a GPU: builds eventide with
# the CUDA backend and the Python package, runs every C++ test (the GPU ones included), the
# Python tests (test_cuda.py on cuda:0 among them), `eventide demo` on the GPU, the GPU
# benchmarks beside the raw CUDA calls, cuBLASLt and PyTorch, and the GPU tests under
# compute-sanitizer. Logs and results go to $OUT (the device tool's output folder) or
# ./gpu-check-out; summary.txt says what passed. (The device tool brings back 8 files: pack
# the folder into one archive there.)
#
#   scripts/gpu-check.sh [build|test|bench|sanitize|all]...     (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
build=${BUILD:-/tmp/eventide-gpu}
py=${PYTHON:-$(command -v python3)}
jobs=$(nproc)
mkdir -p "$out" "$out/profile"
summary="$out/summary.txt"
steps=("${@:-all}")
want() { [[ " ${steps[*]} " == *" all "* || " ${steps[*]} " == *" $1 "* ]]; }
note() { echo "$*" | tee -a "$summary"; }

note "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"

if want build || want test || want bench || want sanitize; then
  pybind11_dir=$("$py" -m pybind11 --cmakedir 2>/dev/null)
  if cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEVENTIDE_WITH_CUDA=ON \
       -DEVENTIDE_BUILD_PYTHON=ON -DPython_EXECUTABLE="$py" ${pybind11_dir:+-Dpybind11_DIR=$pybind11_dir} \
       > "$out/build.log" 2>&1 && cmake --build "$build" -j "$jobs" >> "$out/build.log" 2>&1; then
    note "build: ok"
  else
    note "build: FAILED (build.log)"
    tail -40 "$out/build.log"
    exit 1
  fi
fi

if want test; then
  (cd "$build" && ctest -j 8 --timeout 300 --output-on-failure) > "$out/ctest.log" 2>&1
  note "ctest: $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)"
  "$build/tests/cpp/cuda_test" > "$out/cuda_test.log" 2>&1
  note "cuda_test: $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_test.log" | tr '\n' ' ')"
  # Other libraries' CUDA objects: native events, device-wide synchronize, priorities, capture.
  "$build/tests/cpp/cuda_interop_test" > "$out/cuda_interop_test.log" 2>&1
  note "cuda_interop_test: $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_interop_test.log" | tr '\n' ' ')"
  # Graphs recorded into CUDA graphs and replayed (issue 29).
  "$build/tests/cpp/cuda_graph_test" > "$out/cuda_graph_test.log" 2>&1
  note "cuda_graph_test: $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_graph_test.log" | tr '\n' ' ')"
  # Inside a PyTorch program (torch, CuPy, Numba objects), on its own first.
  PYTHONPATH="$build/python" "$py" -m pytest tests/python/test_torch_interop.py -q -rs -p no:cacheprovider \
    > "$out/pytest_torch_interop.log" 2>&1
  note "pytest test_torch_interop.py: $(tail -1 "$out/pytest_torch_interop.log")"
  # Two GPUs in one process (issue 14): skipped, saying so, on a machine with one.
  "$build/tests/cpp/multi_gpu_test" > "$out/multi_gpu_test.log" 2>&1
  note "multi_gpu_test: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/multi_gpu_test.log" | tr '\n' ' ')"
  PYTHONPATH="$build/python" "$py" -m pytest tests/python/test_multi_gpu.py -q -rs -p no:cacheprovider \
    > "$out/pytest_multi_gpu.log" 2>&1
  note "pytest test_multi_gpu.py: $(tail -1 "$out/pytest_multi_gpu.log")"
  # Events across processes, the GPU path: a stream in one process waits on the GPU for a kernel
  # of another (the test spawns itself as the other process).
  "$build/tests/cpp/ipc_test" > "$out/ipc_test.log" 2>&1
  note "ipc_test: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/ipc_test.log" | tr '\n' ' ')"
  # Collectives on the GPU through NCCL, a rank per GPU, and the same over NCCL's socket
  # transport (the path between machines), under mpirun (issue 14).
  ranks=$(nvidia-smi -L | wc -l)
  EVENTIDE_DEVICE=cuda mpirun --allow-run-as-root -np "$ranks" "$build/tests/cpp/distributed_test" \
    > "$out/distributed_test.log" 2>&1
  note "distributed_test on cuda, $ranks ranks: exit $?"
  EVENTIDE_DEVICE=cuda NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO PYTHONPATH="$build/python" \
    mpirun --allow-run-as-root -x EVENTIDE_DEVICE -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x NCCL_DEBUG \
    -x PYTHONPATH -np "$ranks" "$py" tests/python/distributed/worker.py > "$out/distributed_socket.log" 2>&1
  note "distributed worker over NCCL sockets, $ranks ranks: exit $?, $(grep -c ': ok' "$out/distributed_socket.log") ranks ok, $(grep -c 'NET/Socket' "$out/distributed_socket.log") NET/Socket lines"
  "$build/tools/eventide" info > "$out/demo.log" 2>&1
  "$build/tools/eventide" demo >> "$out/demo.log" 2>&1
  note "demo on $(sed -n 's/^default device: \([^ ]*\).*/\1/p' "$out/demo.log"): $(tail -1 "$out/demo.log")"
  # The overlap scenario under the profiler: GPU times on the host's clock, as a trace and a page.
  "$build/tools/eventide" demo --device cuda:0 --only 16 --trace "$out/profile/trace-cuda.json" \
    --timeline "$out/profile/timeline-cuda.html" > "$out/profile.log" 2>&1
  note "demo --only 16 under the profiler: $(tail -1 "$out/profile.log")"
  PYTHONPATH="$build/python" "$py" -m pytest tests/python -q -p no:cacheprovider > "$out/pytest.log" 2>&1
  note "pytest: $(tail -1 "$out/pytest.log")"
fi

if want bench; then
  # (The JSON stays in the build folder: the device tool brings back 8 files at most.)
  "$build/bench/eventide_bench_cuda" --out="$build/bench_cuda.json" > "$out/bench_cuda.md" 2>&1
  note "bench cuda: $(grep 'Goals met' "$out/bench_cuda.md")"
  # Cross-device stream waits beside cudaStreamWaitEvent (two GPUs; says it skips otherwise).
  "$build/bench/eventide_bench_multi_gpu" > "$out/bench_multi_gpu.md" 2>&1
  note "bench multi-gpu: $(grep -E 'one-way|skipped' "$out/bench_multi_gpu.md" | tr '\n' ' ')"
  # Collectives beside ncclAllReduce / MPI_Allreduce (C++) and torch.distributed (Python), a
  # rank per GPU (issue 14; docs/SCALE_OUT.md).
  ranks=$(nvidia-smi -L | wc -l)
  mpirun --allow-run-as-root -np "$ranks" "$build/bench/eventide_bench_distributed" \
    > "$out/bench_distributed.md" 2>&1
  note "bench distributed ($ranks ranks): $(grep -c '^|' "$out/bench_distributed.md") table rows"
  PYTHONPATH="$build/python" mpirun --allow-run-as-root -x PYTHONPATH -np "$ranks" "$py" \
    bench/distributed_bench.py >> "$out/bench_distributed.md" 2>&1
  PYTHONPATH="$build/python" "$py" bench/python_bench.py --device cuda:0 \
    --json "$build/bench_python.json" --md "$out/bench_python.md" > /dev/null 2>&1
  note "bench python: $(grep -c '| yes |' "$out/bench_python.md") goals met, $(grep -c 'no\*\*' "$out/bench_python.md") missed"
  # `eventide bench`: the suite with its progress lines, the table, JSON, Markdown and SVG.
  "$build/tools/eventide" bench --device cuda:0 --out "$out/eventide-bench" \
    > "$out/eventide_bench.log" 2>&1
  note "eventide bench on cuda:0: $(grep 'Goals met' "$out/eventide_bench.log")"
fi

if want sanitize; then
  if command -v compute-sanitizer > /dev/null; then
    # Timing measurements mean nothing under the sanitizer (it slows every call); the rest runs.
    filter='CudaTest.*:-CudaTest.TimeElapsed*:CudaTest.TheProfilerPuts*:CudaTest.OutOfMemory*'
    filter+=':CudaTest.ElapsedTime*:CudaTest.AMarkerAddsNoGap*:CudaTest.ADrainedGpu*:CudaTest.MarkersHeld*'
    for tool in memcheck racecheck; do
      compute-sanitizer --tool "$tool" --error-exitcode 9 \
        "$build/tests/cpp/cuda_test" --gtest_filter="$filter" > "$out/sanitizer_$tool.log" 2>&1
      note "compute-sanitizer $tool: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer_$tool.log" | tail -1))"
    done
    compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/cpp/cuda_interop_test" \
      > "$out/sanitizer_interop.log" 2>&1
    note "compute-sanitizer memcheck, cuda_interop_test: exit $? ($(grep -E 'ERROR SUMMARY' "$out/sanitizer_interop.log" | tail -1))"
    for tool in memcheck racecheck; do
      # (Left out: the timing test, and the one whose forbidden CUDA call is the point.)
      compute-sanitizer --tool "$tool" --error-exitcode 9 "$build/tests/cpp/cuda_graph_test" \
        --gtest_filter='-*TimeTheLatestReplay:*StreamCaptureForbids*' > "$out/sanitizer_graph_$tool.log" 2>&1
      note "compute-sanitizer $tool, cuda_graph_test: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer_graph_$tool.log" | tail -1))"
    done
  else
    note "compute-sanitizer: not installed here"
  fi
fi
cat "$summary"
