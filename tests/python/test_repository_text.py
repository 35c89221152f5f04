"""What users read speaks of the project itself.

The README, the docs, the examples, the CLI and the benchmarks' texts: the tutorial eventide
implements is called the torch.mps.Event tutorial (never by an internal nickname), the
examples are in the project's own words (no quoted Japanese), nothing names a path outside the
repository, and the license is there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Files users read: docs, examples, and the sources of the texts the tools print.
USER_FACING = ["README.md", "docs", "examples", "tools", "bench", "python/eventide", "include/eventide",
               "Makefile"]

# "seed" as a random generator's seed is an ordinary word; as a name for the tutorial it is not.
RNG_SEED = re.compile(r"manual_seed|_seed|seed_|\(seed\b|\bseed\s*[:=),]|`seed`|same seed|random seed|"
                      r"seeds the generator|under key `seed`", re.IGNORECASE)
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")
OUTSIDE_PATH = re.compile(r"/work/|\.\./shared|shared/seed|ANCHORS\.md")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "--", *USER_FACING], cwd=ROOT, capture_output=True,
                             text=True, timeout=30, check=True).stdout
        files = [ROOT / line for line in out.splitlines()]
    except (OSError, subprocess.SubprocessError):
        # A source tree without git (an unpacked archive): every file below those paths.
        files = []
        for top in USER_FACING:
            p = ROOT / top
            files += [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
    return [f for f in files if f.suffix not in {".png", ".svg"} and f.exists()]


def lines_matching(pattern: re.Pattern, keep=lambda line: True) -> list[str]:
    found = []
    for f in tracked_files():
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if pattern.search(line) and keep(line):
                found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    return found


def test_the_tutorial_is_never_called_the_seed():
    def names_the_tutorial(line: str) -> bool:
        return bool(re.search(r"seed", RNG_SEED.sub("", line), re.IGNORECASE))

    assert lines_matching(re.compile("seed", re.IGNORECASE), names_the_tutorial) == []


def test_examples_and_docs_are_in_the_projects_own_words():
    assert lines_matching(CJK) == []


def test_no_path_outside_the_repository_is_named():
    assert lines_matching(OUTSIDE_PATH) == []


def test_the_license_is_apache_2():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0" in text


def test_the_tutorial_page_exists_and_the_readme_links_it():
    assert (ROOT / "docs" / "TUTORIAL.md").is_file()
    assert "docs/TUTORIAL.md" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("pattern", ["seed 1", "beyond the seed", "seed tutorial"])
def test_the_demo_and_cli_say_tutorial(pattern):
    for f in (ROOT / "tools" / "eventide").glob("*.cpp"):
        assert pattern not in f.read_text(encoding="utf-8"), f


SOURCE_SUFFIXES = (".cpp", ".hpp", ".cu", ".py", ".js")
LONG_FILE_LINES = 600


def test_a_source_file_over_600_lines_says_why_at_its_top():
    # One concern per file: a longer one says in its first lines why it is kept whole.
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=30,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout: the tracked sources cannot be listed")
    unexplained = []
    for name in out.splitlines():
        path = ROOT / name
        if not name.endswith(SOURCE_SUFFIXES) or not path.is_file():
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        if len(lines) > LONG_FILE_LINES and not any("600 lines" in line or "the length" in line
                                                   for line in lines[:30]):
            unexplained.append(f"{name} ({len(lines)} lines)")
    assert not unexplained, ("split these, or say at their top why they are kept whole "
                             f"(a line with '600 lines' or 'the length'): {unexplained}")
