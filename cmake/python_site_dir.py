"""Prints where `make install` puts the Python package, relative to the install prefix.

Usage: python3 python_site_dir.py PREFIX   (run with the interpreter the package is for)

The answer is a directory that this interpreter searches, when it has one under PREFIX: for
Debian's /usr/local that is lib/python3.X/dist-packages (its sysconfig scheme, posix_local,
would say local/lib/..., which no interpreter searches), for /usr lib/python3/dist-packages,
for a virtual environment its site-packages. For any other prefix, the interpreter's standard
layout there (posix_prefix: lib/python3.X/site-packages), which PYTHONPATH then names.
"""
import os
import sys
import sysconfig


def site_dir(prefix: str) -> str:
    prefix = os.path.realpath(prefix)
    searched = []
    for entry in sys.path:
        path = os.path.realpath(entry) if entry else ""
        if os.path.basename(path) in ("site-packages", "dist-packages") and \
                os.path.commonpath([path, prefix]) == prefix and path != prefix:
            searched.append(os.path.relpath(path, prefix))
    if searched:
        # The nearest: under /usr, lib/python3/dist-packages and not /usr/local's directory.
        # (sorted is stable: among equals, the interpreter's order.)
        return sorted(searched, key=lambda rel: rel.count(os.sep))[0]
    platlib = sysconfig.get_path("platlib", "posix_prefix", vars={"base": prefix, "platbase": prefix})
    return os.path.relpath(platlib, prefix)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(site_dir(sys.argv[1]))
