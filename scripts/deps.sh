#!/usr/bin/env bash
# Installs the Debian packages eventide's build needs, when run as root; otherwise names the
# missing ones and fails. Usage: scripts/deps.sh [group...]
#   groups: build test bench python browser (chromium, for the timeline's browser test)
set -euo pipefail

# The library itself needs only g++/cmake and OpenBLAS (CUDA where built); nlohmann-json3-dev
# and libcli11-dev are for the eventide command and the tests, libopenmpi-dev and openmpi-bin
# for ev.distributed over MPI (and its mpirun tests), pkgconf for the pkg-config
# test, python3-venv/-pip/-setuptools/-wheel for `pip install .` (offline) and its test,
# libasio-dev (standalone asio, header-only) for the C++ coroutines' real client: the asio test
# (tests/cpp/coro_asio_test.cpp) and the asio server example; the library does not need it.
declare -A PACKAGES=(
  [build]="cmake ninja-build g++ libopenblas-dev libcli11-dev nlohmann-json3-dev libopenmpi-dev openmpi-bin"
  [test]="libgtest-dev libgmock-dev nlohmann-json3-dev pkgconf libasio-dev"
  [bench]="libbenchmark-dev"
  [python]="python3 python3-dev pybind11-dev python3-numpy python3-pytest python3-hypothesis python3-venv python3-pip python3-setuptools python3-wheel"
  [browser]="chromium"
)

wanted=()
for g in "${@:-build}"; do
  [[ -n "${PACKAGES[$g]:-}" ]] || { echo "deps.sh: unknown group '$g'" >&2; exit 2; }
  wanted+=(${PACKAGES[$g]})
done

missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
  echo "eventide needs these Debian packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
