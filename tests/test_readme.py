"""The README is the front door (issue 68): what fedlab is, the two commands and their
prerequisites, the layout, where to start reading and links. Results and their history live in
docs/results.md, so the README stays short enough to read at once."""

from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
MOST_LINES = 150


def test_the_readme_stays_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MOST_LINES, f"README.md has {len(lines)} lines, more than {MOST_LINES}: move results to docs/results.md"


def test_the_readme_names_the_two_commands_and_holds_no_results_table():
    text = README.read_text()
    assert "make demo" in text and "make test" in text
    # A results table is a markdown table with a figure per cell; the prerequisites' table is the one table kept.
    tables = [line for line in text.splitlines() if line.startswith("| ---")]
    assert len(tables) == 1, f"README.md has {len(tables)} tables; results belong in docs/results.md"
