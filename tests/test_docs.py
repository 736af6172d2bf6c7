"""The README and docs/ stay true to the tree: links resolve, the README stays short, its examples are the tested ones."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose(text: str) -> str:
    """The text outside fenced code blocks (a link in a code block is code, not a link)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(line)
    return "\n".join(kept)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes for a page's headings (lower case, punctuation dropped, spaces to hyphens, repeats numbered)."""
    seen: dict[str, int] = {}
    for line in prose(page.read_text(encoding="utf-8")).splitlines():
        match = _HEADING.match(line)
        if not match:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(2))
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def links(page: Path) -> list[str]:
    """The relative links of a page (web addresses and mail links left out)."""
    return [target for target in _LINK.findall(prose(page.read_text(encoding="utf-8")))
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def broken(page: Path) -> list[str]:
    """A page's links whose file, or whose heading anchor, does not exist."""
    problems = []
    for target in links(page):
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: no heading with that anchor")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves_to_a_file_and_heading(page: Path) -> None:
    """Each relative link in the README and docs/*.md names a file that exists, and a heading of it when it has an anchor."""
    assert broken(page) == []


def test_the_link_checker_finds_links_and_catches_broken_ones(tmp_path: Path) -> None:
    """The checker sees links outside code, ignores them inside code, and reports a missing file and a missing anchor."""
    (tmp_path / "other.md").write_text("# A title, with `code`!\n\n## Again\n## Again\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-title-with-code) [ok](other.md#again-1) [web](https://example.org)\n"
                    "[gone](missing.md) [bad anchor](other.md#nowhere)\n```\n[in code](nowhere.md)\n```\n",
                    encoding="utf-8")
    assert broken(page) == ["missing.md: no such file", "other.md#nowhere: no heading with that anchor"]
    assert sum(len(links(p)) for p in PAGES) > 50


def test_the_readme_fits_in_150_lines_and_opens_with_the_two_commands() -> None:
    """The README is at most 150 lines and its first code block is exactly `./run demo` and `./run tests`."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    first_block = re.search(r"```bash\n(.*?)```", text, re.DOTALL)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["./run demo", "./run tests"]
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().endswith("exec ./run tests")


def readme_excerpts() -> list[tuple[str, list[str]]]:
    """Each README code excerpt with the example file named in the paragraph before it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"```python\n(.*?)```", text, re.DOTALL):
        before = text[:match.start()].rstrip().split("\n\n")[-1]
        named = re.findall(r"\]\((examples/\w+\.py)\)", before)
        found.append((named[-1] if named else "", match.group(1).splitlines()))
    return found


def test_every_readme_excerpt_is_part_of_a_tested_example() -> None:
    """Each Python block of the README names its example, whose lines it quotes, and a test under tests/ runs that example."""
    excerpts = readme_excerpts()
    assert len(excerpts) >= 3
    test_sources = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("test_*.py"))
    for example, lines in excerpts:
        assert example, f"a README code block names no example before it: {lines[:1]}"
        source = {line.strip() for line in (ROOT / example).read_text(encoding="utf-8").splitlines()}
        quoted = [re.sub(r"\s+#\s.*$", "", line).strip() for line in lines]
        missing = [line for line in quoted if line and line != "..." and not any(line in s for s in source)]
        assert missing == [], f"{example} does not have these README lines: {missing}"
        assert f'"{Path(example).name}"' in test_sources, f"no test runs {example}"


def test_the_runtime_example_of_the_guarantees_page_runs() -> None:
    """docs/guarantees.md's example runs three batches on a manual clock and prints each total and its three delays."""
    text = (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert block is not None
    result = subprocess.run([sys.executable, "-c", block.group(1)], capture_output=True, text=True, timeout=60,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "1000 ms 45", "2000 ms 45", "3000 ms 45",
        "1000 ms 0 ms 0 ms 0 ms", "2000 ms 0 ms 0 ms 0 ms", "3000 ms 0 ms 0 ms 0 ms",
    ]


def test_every_example_the_readme_links_to_is_run_by_a_test() -> None:
    """Each examples/*.py the README links to is named by a test under tests/, so what the README shows cannot rot."""
    linked = set(re.findall(r"\]\((examples/\w+\.py)\)", (ROOT / "README.md").read_text(encoding="utf-8")))
    assert len(linked) >= 5
    test_sources = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("test_*.py"))
    assert sorted(e for e in linked if f'"{Path(e).name}"' not in test_sources) == []
