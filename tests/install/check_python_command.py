"""`python -m eventide` is the eventide program: for the same arguments, the same stdout, stderr
and exit status as the C++ program of the same build (the module carries its code).

Usage (ctest runs it with the interpreter the build is for, PYTHONPATH=<build>/python):
  python3 check_python_command.py PROGRAM
"""
import os
import subprocess
import sys

# Each call: what must be the same, byte for byte. `info` prints what this process found of
# the machine (the BLAS the interpreter loaded may differ), so only its status and first line.
SAME = [["--help"], ["help", "bench"], ["version"], ["--version"], ["frobnicate"],
        ["demo", "--device", "tpu"], ["trace", "merge", "--help"], ["bench", "--help"]]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return r.returncode, r.stdout, r.stderr


def main() -> int:
    program = sys.argv[1]
    module = [sys.executable, "-m", "eventide"]
    failures = []
    for args in SAME:
        want = run([program, *args])
        got = run([*module, *args])
        print(f"eventide {' '.join(args)}: exit {want[0]} / python -m eventide: exit {got[0]}")
        if got != want:
            failures.append(f"{' '.join(args)}:\n  program: {want}\n  python -m eventide: {got}")
    status, out, err = run([*module, "info"])
    want_status, want_out, _ = run([program, "info"])
    print(f"python -m eventide info: exit {status}\n{out}{err}")
    if status != want_status or out.splitlines()[:1] != want_out.splitlines()[:1]:
        failures.append(f"info: exit {status} (program: {want_status}), first line "
                        f"{out.splitlines()[:1]} (program: {want_out.splitlines()[:1]})")
    if failures:
        sys.exit("FAILED: python -m eventide differs from the program:\n" + "\n".join(failures))
    print(f"ok: python -m eventide answered {len(SAME) + 1} calls as {program} does")
    return 0


if __name__ == "__main__":
    sys.exit(main())
