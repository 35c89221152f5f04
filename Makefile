# eventide's entry points. Each target installs the Debian packages it needs (as root) or
# names them (otherwise), configures CMake if needed, builds and runs.
#
#   make run        build, then run `eventide demo` (every seed scenario, default device)
#   make test       build, then run every test (C++ and Python tests, examples)
#   make bench      build (Release), run the benchmarks, write build/bench/results.md
#   make sanitize   the tests under ThreadSanitizer, then AddressSanitizer + UBSan
#   make gpu-check  on a machine with a GPU: build with CUDA, GPU tests, benchmarks, sanitizer
#   make install    install into PREFIX (default /usr/local)

BUILD     ?= build
JOBS      ?= $(shell nproc)
PREFIX    ?= /usr/local
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")
CMAKE_ARGS ?=
CTEST_ARGS ?=

.PHONY: all run test bench sanitize sanitize-thread sanitize-address gpu-check install deps clean

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

# The CPU backend under the sanitizers (the CUDA backend is left out there: no GPU).
sanitize: sanitize-thread sanitize-address

# The Python package is left out of the sanitizer builds: the interpreter is not instrumented.
sanitize-thread: deps
	cmake -S . -B build-tsan -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DEVENTIDE_SANITIZE=thread -DEVENTIDE_WITH_CUDA=OFF -DEVENTIDE_BUILD_BENCHMARKS=OFF
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" OPENBLAS_NUM_THREADS=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 600 $(CTEST_ARGS)

sanitize-address: deps
	cmake -S . -B build-asan -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DEVENTIDE_SANITIZE=address,undefined -DEVENTIDE_WITH_CUDA=OFF -DEVENTIDE_BUILD_BENCHMARKS=OFF
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1" \
	  ctest --output-on-failure -j $(JOBS) --timeout 600 $(CTEST_ARGS)

gpu-check:
	scripts/gpu-check.sh

install: all
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) build-tsan build-asan
