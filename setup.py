"""The build step of eventide's Python package that setuptools cannot do alone.

The metadata is in pyproject.toml. This drives CMake: it configures the project with the
Python package on (and the tests, tools, benchmarks and examples off), builds the extension
target `_eventide`, and puts the module CMake made where setuptools packs it. The pure-Python
files come from python/eventide as setuptools finds them.

Environment:
  EVENTIDE_CMAKE_ARGS       more CMake arguments, e.g. "-DEVENTIDE_WITH_CUDA=OFF"
  CMAKE_BUILD_PARALLEL_LEVEL  build jobs (CMake reads it; default: every core)
  EVENTIDE_CMAKE_BUILD_DIR  an already configured build tree with EVENTIDE_BUILD_PYTHON=ON:
                            build `_eventide` there instead of configuring a new one (what
                            the package test does, to pack the module ctest tested)
"""

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


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
    subprocess.run(args, check=True)


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        prebuilt = os.environ.get("EVENTIDE_CMAKE_BUILD_DIR")
        if prebuilt:
            build_dir = Path(prebuilt).resolve()
        else:
            build_dir = Path(self.build_temp).resolve() / "cmake"
            cmake_configure(build_dir)
        build = ["cmake", "--build", str(build_dir), "--target", "_eventide"]
        if "CMAKE_BUILD_PARALLEL_LEVEL" not in os.environ:
            build += ["--parallel", str(os.cpu_count() or 1)]
        subprocess.run(build, check=True)

        # CMake names the module with the interpreter's suffix, as setuptools does.
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = build_dir / "python" / "eventide" / ("_eventide" + suffix)
        if not built.exists():
            sys.exit(f"setup.py: CMake did not make {built}: was that tree configured for "
                     f"another interpreter than {sys.executable}?")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)


setup(
    ext_modules=[CMakeExtension("eventide._eventide")],
    cmdclass={"build_ext": CMakeBuild},
    # Not build/: that is the Makefile's CMake tree.
    options={"build": {"build_base": "build-python"}},
)
