"""A process's label in its traces, and the traces of several processes merged on one clock
(issue 14): ev.set_process_label, Profile.start_ns / process_label, the trace's otherData, and
`eventide trace merge -o OUT IN...` over traces written by two processes of a pretend job; the
output is named by -o alone and is never one of the inputs.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import eventide as ev


def _cli():
    """The `eventide` program of this build: $EVENTIDE_CLI (ctest sets it), else beside the
    package in the build folder (build/python/eventide -> build/tools/eventide)."""
    if os.environ.get("EVENTIDE_CLI"):
        return Path(os.environ["EVENTIDE_CLI"])
    return Path(ev.__file__).resolve().parents[2] / "tools" / "eventide"


CLI = _cli()
needs_cli = pytest.mark.skipif(not CLI.exists(), reason=f"the eventide program is not built ({CLI})")


@pytest.fixture
def restore_label():
    yield
    ev.set_process_label()


def small_profile():
    with ev.profile() as prof:
        a = ev.ones(32, 32)
        (a @ a).wait()
    return prof.profile


def test_the_label_is_in_the_trace_and_the_profile(restore_label):
    assert ev.process_label() == {"rank": None, "size": None, "host": None, "clock_offset_ns": 0}
    with pytest.raises(ev.InvalidArgumentError, match="not below the size"):
        ev.set_process_label(rank=2, size=2)
    with pytest.raises(ev.InvalidArgumentError, match="negative"):
        ev.set_process_label(rank=-3)
    with pytest.raises(TypeError):
        ev.set_process_label(1, 2)  # keywords only: rank and size are easy to swap
    ev.set_process_label(rank=1, size=4, host="node-9", clock_offset_ns=-250)
    assert ev.process_label() == {"rank": 1, "size": 4, "host": "node-9", "clock_offset_ns": -250}
    p = small_profile()
    assert p.process_label["rank"] == 1
    assert p.start_ns > 0
    trace = json.loads(p.chrome_trace())
    other = trace["otherData"]
    assert (other["rank"], other["size"], other["host"], other["clock_offset_ns"]) == (1, 4, "node-9", -250)
    assert other["start_ns"] == p.start_ns and other["clock"] == "steady"
    assert other["os_pid"] == os.getpid()
    names = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"]
    assert names and all(n.startswith("rank 1 · ") for n in names), names


WRITER = r"""
import sys, eventide as ev
out, rank, offset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ev.set_process_label(rank=rank, size=2, host=f"node-{rank}", clock_offset_ns=offset)
s = ev.Stream("cpu")
with ev.profile() as prof:
    x = ev.ones(64, 64) + ev.ones(64, 64)
    e = ev.Event()
    e.record(x)
    s.wait(e)
    with s:
        y = x @ x
    y.wait()
prof.export_chrome_trace(out)
"""


def write_trace(path, rank, offset_ns):
    subprocess.run([sys.executable, "-c", WRITER, str(path), str(rank), str(offset_ns)],
                   check=True, timeout=60)
    return path


@needs_cli
def test_two_processes_merged_on_one_clock_sorted_by_rank(tmp_path):
    # Rank 1 runs first; rank 0's clock is said to be 3 s behind the reference.
    offset = 3_000_000_000
    r1 = write_trace(tmp_path / "r1.json", 1, 0)
    r0 = write_trace(tmp_path / "r0.json", 0, offset)
    out = tmp_path / "merged.json"
    done = subprocess.run([str(CLI), "trace", "merge", "-o", str(out), str(r1), str(r0)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "merged 2 traces (ranks 0, 1)" in done.stdout
    t0_in, t1_in, merged = (json.loads(p.read_text()) for p in (r0, r1, out))
    origin0 = t0_in["otherData"]["start_ns"] + offset
    origin1 = t1_in["otherData"]["start_ns"]
    start = min(origin0, origin1)
    assert merged["otherData"]["start_ns"] == start
    assert [r["rank"] for r in merged["otherData"]["ranks"]] == [0, 1]

    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name"}
    pids = sorted(names)
    ranks = [0 if names[p].startswith("rank 0 · ") else 1 for p in pids]
    assert ranks == sorted(ranks) and set(ranks) == {0, 1}, names

    def timed(trace):
        return [e["ts"] for e in trace["traceEvents"] if "ts" in e]

    want = [t + (origin0 - start) / 1e3 for t in timed(t0_in)] + \
           [t + (origin1 - start) / 1e3 for t in timed(t1_in)]
    assert timed(merged) == pytest.approx(want, abs=1e-3)
    assert (origin0 - start) / 1e3 > 2.9e6

    # Two traces of one rank: an error naming both files, and how each got its rank.
    again = write_trace(tmp_path / "again.json", 0, 0)
    dup = subprocess.run([str(CLI), "trace", "merge", "-o", str(tmp_path / "x.json"), str(r0), str(again)],
                         capture_output=True, text=True, timeout=60)
    assert dup.returncode == 1
    assert dup.stderr == (f"eventide trace merge: {r0} and {again} are both labelled rank 0: merge one "
                          "trace per rank (each process labels itself with set_process_label)\n"), dup.stderr
    assert not (tmp_path / "x.json").exists()


@needs_cli
def test_no_input_is_ever_overwritten(tmp_path):
    # `trace merge r0.json r1.json` took r0.json as the output and overwrote it, exit status 0.
    r0 = write_trace(tmp_path / "r0.json", 0, 0)
    r1 = write_trace(tmp_path / "r1.json", 1, 0)
    before = {p: p.read_bytes() for p in (r0, r1)}
    old = subprocess.run([str(CLI), "trace", "merge", str(r0), str(r1)],
                         capture_output=True, text=True, timeout=60)
    assert old.returncode == 2, old.stdout + old.stderr
    assert "no output named: name it with -o" in old.stderr and "usage: eventide trace merge" in old.stderr
    # An output that is an input, by its own name or another (a link): refused as well.
    (tmp_path / "link.json").symlink_to(r1)
    for out in (r0, f"{tmp_path}/./r1.json", tmp_path / "link.json"):  # (pathlib drops the "./")
        same = subprocess.run([str(CLI), "trace", "merge", "-o", str(out), str(r0), str(r1)],
                              capture_output=True, text=True, timeout=60)
        assert same.returncode == 2, same.stdout + same.stderr
        assert f"the output {out} is the input" in same.stderr and "name a new file with -o" in same.stderr
    assert {p: p.read_bytes() for p in (r0, r1)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "r0.json", "r1.json"]


@pytest.mark.parametrize("text, words", [
    # 100,000 deep: the merge crashed (recursive serialization).
    ('{"traceEvents": [], "otherData": {"start_ns": 1}, "deep": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "nested deeper than 64 levels"),
    ('{"traceEvents": [{"ph": 5, "ts": 1}], "otherData": {"start_ns": 1}}', 'event 1: "ph" is number, not a string'),
    ('{"traceEvents": [{"ph": "M", "name": 7}], "otherData": {"start_ns": 1}}', '"name" is number'),
    ('{"traceEvents": [], "otherData": {"start_ns": 18446744073709551615}}', '"start_ns" is not a 64-bit integer'),
    ('{"traceEvents": [], "otherData": {"start_ns": 1, "rank": 4294967296}}', '"rank" is not a rank'),
], ids=["deep", "ph", "name", "start_ns", "rank"])
def test_malformed_inputs_are_refused_naming_the_file_and_the_field(tmp_path, text, words):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    good = tmp_path / "good.json"
    good.write_text('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "pid": 1, "name": "a"}], '
                    '"otherData": {"start_ns": 1}}')
    r = subprocess.run([str(CLI), "trace", "merge", "-o", str(tmp_path / "out.json"), str(bad), str(good)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "bad.json" in r.stderr and words in r.stderr, r.stderr
