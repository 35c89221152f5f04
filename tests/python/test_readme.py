"""The README's snippets run as written (issue 27): each ```python block is run as a script of
its own, in a fresh directory, after ``import eventide as ev`` (which every snippet after the
first assumes); the ```cpp block is compiled as the body of ``main`` against this build and
run. A snippet that needs what this machine lacks (PyTorch with a GPU, mpirun) is skipped with
the reason; the distributed one runs under ``mpirun -np 2``.

Nothing here is copied from the README: the blocks are read from it each time, so the two
cannot drift apart again.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import eventide as ev

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BUILD = Path(ev.__file__).resolve().parents[2]  # build/python/eventide -> build
MPIRUN = shutil.which("mpirun") or shutil.which("mpiexec")
pytestmark = pytest.mark.time_limit(240)


def blocks(language: str) -> list[tuple[int, str]]:
    """(line, text) of every fenced block of `language` in the README."""
    text = README.read_text(encoding="utf-8")
    found = []
    for m in re.finditer(r"^```" + language + r"\n(.*?)^```", text, re.M | re.S):
        found.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return found


PYTHON = blocks("python")


def test_the_readme_has_the_snippets_this_test_runs():
    assert len(PYTHON) >= 8, "fewer Python snippets than the README had: update this test"
    assert len(blocks("cpp")) >= 1
    # A coroutine defined and never run shows nothing, and fails nothing: say it is run.
    for line, code in PYTHON:
        for name in re.findall(r"^async def (\w+)", code, re.M):
            assert f"asyncio.run({name}(" in code, f"README.md:{line} defines {name}() and never runs it"


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(Path(ev.__file__).resolve().parents[1]) + os.pathsep + e.get("PYTHONPATH", "")
    return e


@pytest.mark.parametrize("line, code", PYTHON, ids=[f"README.md:{n}" for n, _ in PYTHON])
def test_python_snippet_runs_as_written(line, code, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text("import eventide as ev\n" + code)
    command = [sys.executable, str(script)]
    if "import torch" in code:
        torch = pytest.importorskip("torch", reason="the snippet needs PyTorch")
        if not torch.cuda.is_available() or not ev.is_available("cuda:0"):
            pytest.skip("the snippet needs PyTorch with a GPU that eventide also sees")
    run_env = env()
    if "ev.distributed.init()" in code:
        if MPIRUN is None or not ev.distributed.capabilities()["mpi"]:
            pytest.skip("the snippet needs mpirun and an eventide built with MPI")
        command = [MPIRUN, "-np", "2", *command]
        run_env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                       OMPI_MCA_rmaps_base_oversubscribe="1")
    r = subprocess.run(command, cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"README.md:{line} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"


def test_cpp_snippet_compiles_and_runs(tmp_path):
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    library = BUILD / "src" / "libeventide.so"
    if cxx is None or not library.exists():
        pytest.skip(f"needs a C++ compiler and the built library ({library})")
    line, code = blocks("cpp")[0]
    includes = [l for l in code.splitlines() if l.startswith("#include")]
    body = "\n".join(l for l in code.splitlines() if not l.startswith("#include") and not l.startswith("namespace ev"))
    source = tmp_path / "snippet.cpp"
    source.write_text("\n".join(includes) + "\n#include <chrono>\nnamespace ev = eventide;\n"
                      "using namespace std::chrono_literals;\n"
                      "int main() {\n" + body + "\nreturn 0;\n}\n")
    program = tmp_path / "snippet"
    r = subprocess.run([cxx, "-std=c++20", str(source), "-o", str(program), f"-I{ROOT / 'include'}",
                        f"-I{BUILD / 'include'}", str(library), f"-Wl,-rpath,{library.parent}", "-pthread"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"README.md:{line} does not compile:\n{r.stderr[-4000:]}"
    r = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"README.md:{line} failed when run:\n{r.stdout}\n{r.stderr}"
