"""The build step of eventide's Python package that setuptools cannot do alone.

The metadata is in pyproject.toml (the license, which setuptools takes in different forms
before and from version 77, is given here). This drives CMake: it configures the project with
the Python package on (and the tests, the program, benchmarks and examples off; the
extension carries the program's code for the package's `eventide` command where CLI11 and
nlohmann_json are found), builds the extension target `_eventide`, and puts the module CMake
made where setuptools packs it. The pure-Python files come from python/eventide as setuptools
finds them.

It prints each CMake command and CMake prints each build step: a build from scratch takes
minutes (about 3 on 2 cores), and pip shows this output only with -v.

Environment:
  EVENTIDE_CMAKE_ARGS       more CMake arguments, e.g. "-DEVENTIDE_WITH_CUDA=OFF"
  CMAKE_BUILD_PARALLEL_LEVEL  build jobs (CMake reads it; default: every core)
  EVENTIDE_CMAKE_BUILD_DIR  an already configured build tree with EVENTIDE_BUILD_PYTHON=ON:
                            build `_eventide` there instead of configuring a new one (what
                            the package test does, to pack the module ctest tested)
"""

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import setuptools
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def run(args: list) -> None:
    print("setup.py: " + shlex.join(str(a) for a in args), flush=True)
    subprocess.run(args, check=True)


def check_wheel_builder() -> None:
    """setuptools before 70.1 makes wheels, and under pip their metadata, with the `wheel`
    package's bdist_wheel; without it, it stops with "invalid command 'bdist_wheel'", which
    does not say what is missing."""
    if not {"bdist_wheel", "dist_info", "editable_wheel"}.intersection(sys.argv[1:]):
        return
    if importlib.util.find_spec("wheel") or importlib.util.find_spec("setuptools.command.bdist_wheel"):
        return
    sys.exit(f"setup.py: {sys.executable} has setuptools {setuptools.__version__} without the "
             "`wheel` package, which it needs to build a wheel. Use Debian's /usr/bin/python3 "
             "(python3-wheel), or install wheel for this interpreter; online, `pip install .` "
             "without --no-build-isolation fetches the build tools itself.")


def license_metadata() -> dict:
    """Apache-2.0, as the setuptools in use writes it (pyproject.toml says why here)."""
    if int(setuptools.__version__.split(".")[0]) >= 77:
        return {"license_expression": "Apache-2.0"}  # License-Expression (PEP 639)
    return {"license": "Apache-2.0"}


def cmake_configure(build_dir: Path) -> None:
    args = [
        "cmake", "-S", str(ROOT), "-B", str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        "-DEVENTIDE_BUILD_PYTHON=ON",
        "-DEVENTIDE_BUILD_TESTS=OFF",
        "-DEVENTIDE_BUILD_TOOLS=OFF",
        "-DEVENTIDE_BUILD_BENCHMARKS=OFF",
        "-DEVENTIDE_BUILD_EXAMPLES=OFF",
        f"-DPython_EXECUTABLE={sys.executable}",
    ]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    try:  # pybind11 from PyPI (an isolated build) says where its CMake files are
        import pybind11

        args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
    except ImportError:
        pass  # Debian's pybind11-dev: CMake finds it by itself
    args += shlex.split(os.environ.get("EVENTIDE_CMAKE_ARGS", ""))
    run(args)


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        start = time.monotonic()
        prebuilt = os.environ.get("EVENTIDE_CMAKE_BUILD_DIR")
        if prebuilt:
            build_dir = Path(prebuilt).resolve()
        else:
            build_dir = Path(self.build_temp).resolve() / "cmake"
            cmake_configure(build_dir)
        build = ["cmake", "--build", str(build_dir), "--target", "_eventide"]
        if "CMAKE_BUILD_PARALLEL_LEVEL" not in os.environ:
            build += ["--parallel", str(os.cpu_count() or 1)]
        run(build)
        print(f"setup.py: configured and built _eventide in {time.monotonic() - start:.0f} s",
              flush=True)

        # CMake names the module with the interpreter's suffix, as setuptools does.
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = build_dir / "python" / "eventide" / ("_eventide" + suffix)
        if not built.exists():
            sys.exit(f"setup.py: CMake did not make {built}: was that tree configured for "
                     f"another interpreter than {sys.executable}?")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)


check_wheel_builder()
setup(
    **license_metadata(),
    ext_modules=[CMakeExtension("eventide._eventide")],
    cmdclass={"build_ext": CMakeBuild},
    # Not build/: that is the Makefile's CMake tree.
    options={"build": {"build_base": "build-python"}},
)
