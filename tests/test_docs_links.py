"""Every relative markdown link in README.md and docs/*.md resolves: the file (or folder) it names
exists in the repository and, for a `#anchor` into a markdown file, a heading of that file has
that anchor (GitHub's rule: lower case, punctuation dropped, spaces to hyphens, -1, -2, ... for
repeats). Links to web addresses are not followed.

Links inside code (fenced blocks and `code spans`) are text, not links, and are not checked;
neither are `# lines` in fenced blocks taken for headings.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+\"[^\"]*\"|\s+'[^']*')?\s*\)")
DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text: str):
    """(line number, line) for every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            continue
        if fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) <= {fence[0]}:
                fence = None
            continue
        yield number, line


def links(text: str):
    """(line number, target) of every inline link, image and link definition outside code."""
    for number, line in prose_lines(text):
        definition = DEFINITION.match(line)
        if definition:
            yield number, definition.group(1).strip("<>")
            continue
        for m in INLINE.finditer(CODE_SPAN.sub(lambda c: " " * len(c.group(0)), line)):
            yield number, m.group(1).strip("<>")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """One line per relative link of `path` that does not resolve, naming where it is and why."""
    problems = []
    for number, target in links(path.read_text(encoding="utf-8")):
        if SCHEME.match(target) or target.startswith("//"):
            continue   # a web address (or mailto:): not followed
        where = f"{path.relative_to(root)}:{number}: ({target})"
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / unquote(file_part)).resolve() if file_part else path
        if root.resolve() not in (resolved, *resolved.parents):
            problems.append(f"{where} points outside the repository")
            continue
        if not resolved.exists():
            problems.append(f"{where}: no such file {resolved.relative_to(root.resolve())}")
            continue
        if anchor and resolved.suffix == ".md" and unquote(anchor).lower() not in anchors(resolved):
            problems.append(f"{where}: {resolved.relative_to(root.resolve())} has no heading with anchor #{anchor}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_relative_link_resolves(doc):
    problems = broken_links(doc)
    assert not problems, "\n".join(problems)


def test_the_check_finds_broken_links(tmp_path):
    """The checker itself: it sees a missing file, a missing anchor and a link out of the
    repository, and passes what resolves, ignoring code and web addresses."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Title\n\n## The algorithm (Sze & Ling 2000), where it lives\n\n"
                                            "## Repeat\n\n## Repeat\n\n```\n# not a heading\n```\n")
    a = tmp_path / "README.md"
    a.write_text("\n".join([
        "[ok](docs/b.md) [ok](docs/b.md#the-algorithm-sze--ling-2000-where-it-lives) [ok](docs/b.md#repeat-1)",
        "[ok](#top) [ok](docs/) [web](https://example.com/x.md) `[code](missing.md)` ![img](docs/b.md)",
        "```", "[in a fence](missing.md)", "```",
        "## Top",
        "[gone](docs/missing.md)",
        "[no anchor](docs/b.md#not-a-heading)",
        "[out](../outside.md)",
        "[gone too][ref]",
        "[ref]: docs/also-missing.md",
    ]))
    problems = broken_links(a, tmp_path)
    assert [p.split(":")[1] for p in problems] == ["7", "8", "9", "11"], problems
    assert "no such file docs/missing.md" in problems[0]
    assert "no heading with anchor #not-a-heading" in problems[1]
    assert "outside the repository" in problems[2]
    assert "docs/also-missing.md" in problems[3]
