"""`make install`'s Python package: where it goes (cmake/python_site_dir.py) is a directory the
interpreter searches, and what is installed there imports.

Usage (ctest runs it with the interpreter the build is for):
  python3 check_python_install.py --source SRC --build BUILD --work DIR --prefix P --dir D
where P and D are the build's CMAKE_INSTALL_PREFIX and EVENTIDE_PYTHON_INSTALL_DIR.
"""
import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path


def searched_under(prefix: str) -> list:
    prefix = os.path.realpath(prefix)
    return [os.path.realpath(p) for p in sys.path
            if p and os.path.basename(p) in ("site-packages", "dist-packages")
            and os.path.commonpath([os.path.realpath(p), prefix]) == prefix]


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--source", "--build", "--work", "--prefix", "--dir"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.source, "cmake"))
    from python_site_dir import site_dir

    # For every prefix under which this interpreter searches a site directory (its own, its
    # base's, Debian's /usr and /usr/local), the directory chosen is one of those.
    failures = []
    for prefix in sorted({sys.prefix, sys.base_prefix, "/usr/local", "/usr"}):
        searched = searched_under(prefix)
        chosen = os.path.realpath(os.path.join(prefix, site_dir(prefix)))
        print(f"{prefix}: {site_dir(prefix)} (searched there: {searched})")
        if searched and chosen not in searched:
            failures.append(f"{prefix}: {chosen} is not searched by {sys.executable}")
    # The build was configured with the same answer for its prefix (unless chosen by hand).
    if searched_under(args.prefix) and \
            os.path.realpath(os.path.join(args.prefix, args.dir)) not in searched_under(args.prefix):
        failures.append(f"the build installs into {args.prefix}/{args.dir}, not searched")
    if failures:
        sys.exit("FAILED:\n  " + "\n  ".join(failures))

    # Installed into a scratch prefix, the package imports from there.
    work = Path(args.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    prefix = work / "prefix"
    subprocess.run(["cmake", "--install", args.build, "--prefix", str(prefix)], check=True,
                   stdout=subprocess.DEVNULL)
    package = prefix / args.dir / "eventide"
    if not list(package.glob("_eventide*.so")):
        sys.exit(f"FAILED: no extension module installed in {package}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(prefix / args.dir)
    code = ("import eventide as ev; "
            f"assert ev.__file__.startswith({str(package)!r}), ev.__file__; "
            "print('imported', ev.__version__, 'from', ev.__file__)")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
