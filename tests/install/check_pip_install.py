"""The Python package as a user installs it: `pip install .` into a fresh virtual environment,
offline, then import it, run an example and the package's `eventide` command (the script
venv/bin/eventide and `python -m eventide`), from outside the source tree and with no
PYTHONPATH, so that only the installed package can be imported. Also `pip wheel .`, and the
wheel's contents and metadata.

Usage (ctest runs it with the interpreter the build is for):
  python3 check_pip_install.py --source SRC --build BUILD --work DIR --example FILE [--fresh]

Without --fresh, pip's build (setup.py) builds the extension in the ctest build tree BUILD
(EVENTIDE_CMAKE_BUILD_DIR): the module ctest tested, in minutes less. With --fresh it
configures and builds a tree of its own, as `pip install .` does for a user.

The environment is made with --system-site-packages so that Debian's setuptools, wheel and
NumPy are seen (or, where this interpreter runs in a virtual environment itself, with a .pth
file naming its site-packages), and pip is told --no-build-isolation and --no-index: nothing is downloaded.
Exits 77 (ctest: skipped) only if a tool it needs is missing (python3-venv).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

SKIP = 77


def run(cmd, **kwargs):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    result = subprocess.run([str(c) for c in cmd], **kwargs)
    if result.returncode != 0:
        sys.exit(f"FAILED ({result.returncode}): {' '.join(str(c) for c in cmd)}")
    return result


def tracked(source: Path) -> list:
    """The tracked files of the tree (git ls-files), or every file if it is not a git tree."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=source, capture_output=True, text=True,
                             timeout=60, check=True).stdout
        return out.splitlines()
    except (OSError, subprocess.SubprocessError):
        return [str(p.relative_to(source)) for p in source.rglob("*") if p.is_file()
                and not any(part.startswith(("build", ".")) for part in p.relative_to(source).parts)]


def copy_source(source: Path, dest: Path) -> None:
    """The tracked part of the tree: not build trees, caches or .git (pip writes its
    egg-info and build-python/ into the copy, not into the source)."""
    def ignore(folder, names):
        top = Path(folder) == source
        return [n for n in names
                if n in ("__pycache__", ".git") or n.endswith(".egg-info")
                or (top and (n.startswith("build") or n.startswith(".")))]
    shutil.copytree(source, dest, ignore=ignore)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--build", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--example", type=Path, required=True)
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args()

    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
    except ImportError as e:
        print(f"SKIPPED: {sys.executable} cannot make a virtual environment with pip ({e}): "
              "install python3-venv")
        return SKIP

    version = (args.source / "VERSION").read_text().strip()
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    source = work / "src"
    copy_source(args.source.resolve(), source)

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "VIRTUAL_ENV")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1",
               PYTHONDONTWRITEBYTECODE="1")
    if not args.fresh:
        env["EVENTIDE_CMAKE_BUILD_DIR"] = str(args.build.resolve())

    venv_dir = work / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", venv_dir], env=env)
    python = venv_dir / "bin" / "python"
    if sys.prefix != sys.base_prefix:
        # This interpreter is itself a virtual environment's (the GPU machine's python3):
        # --system-site-packages shows its base's packages, not the ones installed here
        # (NumPy, setuptools), so a .pth file in the new environment adds this one's.
        import site
        inner = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               env=env, capture_output=True, text=True, check=True).stdout.strip()
        Path(inner, "outer_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    run([python, "-m", "pip", "install", "--no-build-isolation", source], env=env, cwd=work)

    # Imported from the environment's site-packages, the version VERSION says.
    check = ("import sys, sysconfig, eventide as ev\n"
             "site = sysconfig.get_paths()['platlib']\n"
             "assert ev.__file__.startswith(site), (ev.__file__, site)\n"
             f"assert ev.__version__ == {version!r}, ev.__version__\n"
             "print('imported eventide', ev.__version__, 'from', ev.__file__)\n")
    run([python, "-c", check], env=env, cwd=work)
    run([python, args.example.resolve()], env=env, cwd=work)

    # The `eventide` command, as the script pip wrote and as the package's __main__: `info`
    # answers, and a usage error is the program's exit status 2.
    script = venv_dir / "bin" / "eventide"
    if not script.exists():
        sys.exit(f"FAILED: pip installed no {script}")
    for command in ([str(script)], [str(python), "-m", "eventide"]):
        shown = " ".join(command)
        print("+", shown, "info", flush=True)
        info = subprocess.run([*command, "info"], env=env, cwd=work, capture_output=True,
                              text=True, timeout=120)
        print(info.stdout + info.stderr, end="")
        if info.returncode != 0 or not info.stdout.startswith(f"eventide {version}\n") or \
                "default device: " not in info.stdout:
            sys.exit(f"FAILED: {shown} info: exit {info.returncode}")
        bad = subprocess.run([*command, "frobnicate"], env=env, cwd=work, capture_output=True,
                             text=True, timeout=120)
        if bad.returncode != 2 or "unknown command 'frobnicate'" not in bad.stderr:
            sys.exit(f"FAILED: {shown} frobnicate: exit {bad.returncode}, stderr {bad.stderr!r} "
                     "(expected exit 2, the program's usage error)")

    # A wheel, with the extension, the typing files and the metadata.
    wheels = work / "wheels"
    run([python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", wheels, source],
        env=env, cwd=work)
    built = sorted(wheels.glob(f"eventide-{version}-*.whl"))
    if len(built) != 1:
        sys.exit(f"FAILED: expected one eventide-{version} wheel in {wheels}: {built}")
    with zipfile.ZipFile(built[0]) as whl:
        names = whl.namelist()
        metadata = whl.read(f"eventide-{version}.dist-info/METADATA").decode()
    for wanted in ("eventide/__init__.py", "eventide/__init__.pyi", "eventide/py.typed",
                   "eventide/__main__.py"):
        if wanted not in names:
            sys.exit(f"FAILED: {wanted} is not in {built[0].name}: {names}")
    if not any(n.startswith("eventide/_eventide") and n.endswith(".so") for n in names):
        sys.exit(f"FAILED: no extension module in {built[0].name}: {names}")
    for line in ("Name: eventide", f"Version: {version}", "Requires-Python: >=3.9"):
        if line not in metadata.splitlines():
            sys.exit(f"FAILED: the wheel's METADATA has no line '{line}':\n{metadata}")
    # The license in the form this setuptools writes (setup.py): an SPDX expression from
    # setuptools 77 on, the License field before; no license classifier (deprecated from 77).
    lines = metadata.splitlines()
    if not {"License-Expression: Apache-2.0", "License: Apache-2.0"} & set(lines) or \
            any(l.startswith("Classifier: License ::") for l in lines):
        sys.exit(f"FAILED: the wheel's METADATA does not say Apache-2.0 as expected:\n{metadata}")
    with zipfile.ZipFile(built[0]) as whl:
        entry_points = whl.read(f"eventide-{version}.dist-info/entry_points.txt").decode()
    if "eventide = eventide.__main__:main" not in entry_points:
        sys.exit(f"FAILED: the wheel has no `eventide` script:\n{entry_points}")
    if not any(l.startswith("Requires-Dist: numpy") for l in metadata.splitlines()):
        sys.exit(f"FAILED: the wheel does not require numpy:\n{metadata}")
    # A source distribution carries what building it needs: every tracked file that the
    # library's and the module's CMake build reads (pip builds a wheel from the sdist when it
    # installs from one, as from PyPI).
    sdists = work / "sdist"
    run([python, source / "setup.py", "-q", "sdist", "-d", sdists], env=env, cwd=source)
    tarballs = sorted(sdists.glob(f"eventide-{version}.tar.gz"))
    if len(tarballs) != 1:
        sys.exit(f"FAILED: expected one eventide-{version}.tar.gz in {sdists}: {tarballs}")
    with tarfile.open(tarballs[0]) as tar:
        inside = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    needed = [f for f in tracked(args.source.resolve())
              if f in ("VERSION", "CMakeLists.txt", "LICENSE", "pyproject.toml", "setup.py",
                       "python/CMakeLists.txt", "tools/CMakeLists.txt")
              or f.startswith(("include/", "src/", "cmake/", "python/src/", "python/eventide/",
                               "tools/eventide/", "tools/measure/"))
              or (f.startswith("examples/cpp/") and f.endswith(".hpp"))]
    missing = [f for f in needed if f not in inside]
    if not needed or missing:
        sys.exit(f"FAILED: the sdist lacks what its build needs: {missing or 'nothing was checked'}")
    print(f"ok: installed, imported, ran {args.example.name} and the eventide command; built {built[0].name}; "
          f"{tarballs[0].name} has the {len(needed)} files its build reads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
