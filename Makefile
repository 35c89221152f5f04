# eventide's entry points. Each target installs the Debian packages it needs (as root) or
# names them (otherwise), configures CMake if needed, builds and runs.
#
#   make run        build, then run `eventide demo` (every scenario of the torch.mps.Event tutorial, default device)
#   make test       build, then run every test (C++ and Python tests, examples)
#   make bench      build (Release), run the benchmarks, write build/bench/results.md
#   make sanitize   the tests under ThreadSanitizer, then AddressSanitizer + UBSan
#   make soak       build, then the stress, fault and memory tests, longer (more examples and rounds), SOAK_LOOPS times
#   make gpu-check  on a machine with a GPU: build with CUDA, GPU tests, benchmarks, sanitizer
#   make install    install into PREFIX (default /usr/local)

BUILD     ?= build
JOBS      ?= $(shell nproc)
PREFIX    ?= /usr/local
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")
CMAKE_ARGS ?=
CTEST_ARGS ?=

.PHONY: all run test bench sanitize sanitize-thread sanitize-address gpu-check install deps clean soak

all: $(BUILD)/.configured
	cmake --build $(BUILD) -j $(JOBS)

# Debian's interpreter: it is the one with python3-numpy, -pytest and -hypothesis.
PYTHON    ?= /usr/bin/python3

deps:
	@scripts/deps.sh build test bench python
	@scripts/deps.sh browser || echo "chromium is not installed: the timeline's browser test will be skipped"

$(BUILD)/.configured: | deps
	cmake -S . -B $(BUILD) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=Release \
	  -DEVENTIDE_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(PYTHON) $(CMAKE_ARGS)
	@touch $@

run: $(BUILD)/.configured
	cmake --build $(BUILD) -j $(JOBS) --target eventide_cli
	$(BUILD)/tools/eventide demo

test: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300 $(CTEST_ARGS)

bench: all
	scripts/bench.sh $(BUILD)

# The CPU backend under the sanitizers (the CUDA backend is left out there: no GPU; and MPI,
# whose library is not instrumented and keeps memory to process exit, which LeakSanitizer
# would report: the core's must_issue and ordering paths that collectives use are in
# stream_test).
sanitize: sanitize-thread sanitize-address

# The Python package is left out of the sanitizer builds: the interpreter is not instrumented.
sanitize-thread: deps
	cmake -S . -B build-tsan -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DEVENTIDE_SANITIZE=thread -DEVENTIDE_WITH_CUDA=OFF -DEVENTIDE_WITH_MPI=OFF -DEVENTIDE_BUILD_BENCHMARKS=OFF
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" OPENBLAS_NUM_THREADS=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 600 $(CTEST_ARGS)

sanitize-address: deps
	cmake -S . -B build-asan -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DEVENTIDE_SANITIZE=address,undefined -DEVENTIDE_WITH_CUDA=OFF -DEVENTIDE_WITH_MPI=OFF -DEVENTIDE_BUILD_BENCHMARKS=OFF
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1" \
	  ctest --output-on-failure -j $(JOBS) --timeout 600 $(CTEST_ARGS)

gpu-check:
	scripts/gpu-check.sh

# The suite's stress and fault tests with their limits raised (each file reads its variable).
SOAK_LOOPS ?= 3
SOAK_FILES := test_stress.py test_stateful.py test_lock_rule.py test_crafted_inputs.py \
              test_memory.py test_leaks.py test_exit.py test_interrupt.py test_fork.py test_thread_limit.py
soak: all
	cd tests/python && for i in $$(seq $(SOAK_LOOPS)); do \
	  echo "soak: round $$i of $(SOAK_LOOPS)"; \
	  PYTHONPATH=$(CURDIR)/$(BUILD)/python PYTHONDONTWRITEBYTECODE=1 \
	  EVENTIDE_HYPOTHESIS_EXAMPLES=2000 EVENTIDE_STRESS_EXAMPLES=1000 EVENTIDE_STRESS_THREADS=8 \
	  EVENTIDE_SOAK_ROUNDS=2000 $(PYTHON) -m pytest $(SOAK_FILES) -q -p no:cacheprovider || exit 1; \
	done

# Configured for PREFIX first: the Python package goes where the interpreter searches under it
# (for /usr/local on Debian: lib/python3.X/dist-packages; cmake/python_site_dir.py).
install: all
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX)
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) build-tsan build-asan
