"""Sampled call stacks: read from py-spy and Java Flight Recorder, ranked by self time, drawn
as flame graphs (SVG). One representation serves both profilers: a stack is a tuple of frame
names, root first, and a profile maps each stack to the samples that ended in it.

    >>> stacks = read_collapsed("main;serve;decode 3\\nmain;serve 1\\nmain;log 2\\n")
    >>> hottest(stacks, 2)
    [('decode', 3, 0.5), ('log', 2, 0.333)]

A frame's self time is the samples whose innermost frame it is: where the CPU was spent, not who
called it. The flame graph puts the root at the bottom and each frame's callees on top of it,
each box as wide as the samples under it (Brendan Gregg's layout); hovering a box names it.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections import Counter

Stacks = Counter   # tuple of frame names (root first) -> samples


def read_collapsed(text: str) -> Stacks:
    """py-spy's raw format (`--format raw`): one line per distinct stack, frames joined by ';',
    root first, then a space and the samples."""
    stacks: Stacks = Counter()
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(stack.split(";"))] += int(count)
    return stacks


_JFR_FRAME = re.compile(r"^\s+([\w$.<>/]+)\(.*?\)(?:\s+line:\s*\d+)?(?:\s+bci:\s*\d+)?\s*$")


def read_jfr(text: str) -> Stacks:
    """The execution samples `jfr print --events jdk.ExecutionSample` prints, innermost frame
    first in each event's stackTrace; a truncated stack ("...") keeps the frames it has.

    >>> read_jfr('''jdk.ExecutionSample {
    ...   stackTrace = [
    ...     java.util.zip.Inflater.inflate(byte[], int, int) line: 378
    ...     org.example.Main.main(String[]) line: 9
    ...     ...
    ...   ]
    ... }''')
    Counter({('org.example.Main.main', 'java.util.zip.Inflater.inflate'): 1})
    """
    stacks: Stacks = Counter()
    for event in text.split("jdk.ExecutionSample {")[1:]:
        frames = []
        inside = False
        for line in event.splitlines():
            if "stackTrace = [" in line:
                inside = True
            elif inside and line.strip() == "]":
                break
            elif inside:
                match = _JFR_FRAME.match(line)
                if match:
                    frames.append(match.group(1))
        if frames:
            stacks[tuple(reversed(frames))] += 1
    return stacks


def hottest(stacks: Stacks, n: int = 10) -> list[tuple[str, int, float]]:
    """The `n` frames with the most self time: (frame, samples, share of all samples)."""
    total = sum(stacks.values())
    own: Counter = Counter()
    for stack, count in stacks.items():
        own[stack[-1]] += count
    return [(frame, count, round(count / total, 3)) for frame, count in own.most_common(n)]


_ROW, _FONT, _WIDTH = 16, 11, 1200   # pixels: a frame's height, its label, the graph's width


def svg(stacks: Stacks, title: str) -> str:
    """A flame graph of `stacks` as a standalone SVG document; frames narrower than a pixel are
    left out (their samples still widen their callers)."""
    total = sum(stacks.values())
    tree: dict = {}
    for stack, count in stacks.items():
        node = tree
        for frame in stack:
            entry = node.setdefault(frame, [0, {}])
            entry[0] += count
            node = entry[1]
    boxes: list[tuple[int, float, float, str, int]] = []   # depth, x, width, frame, samples

    def lay_out(node: dict, depth: int, x: float) -> None:
        for frame, (count, children) in sorted(node.items()):
            width = _WIDTH * count / total
            if width >= 1:
                boxes.append((depth, x, width, frame, count))
                lay_out(children, depth + 1, x)
            x += width

    lay_out(tree, 0, 0.0)
    depth = 1 + max((b[0] for b in boxes), default=0)
    height = (depth + 2) * _ROW
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
           f'font-family="monospace" font-size="{_FONT}">',
           f'<text x="4" y="{_ROW - 3}" font-size="{_FONT + 2}">{html.escape(title)} '
           f'({total} samples; hover a frame for its name and share)</text>']
    for level, x, width, frame, count in boxes:
        y = height - (level + 1) * _ROW
        label = html.escape(frame[: int(width / (0.62 * _FONT))]) if width > 3 * _FONT else ""
        out.append(f'<g><title>{html.escape(frame)}: {count} samples, {count / total:.1%}</title>'
                   f'<rect x="{x:.1f}" y="{y}" width="{max(width - 0.5, 0.5):.1f}" height="{_ROW - 1}" '
                   f'fill="{_colour(frame)}"/><text x="{x + 2:.1f}" y="{y + _ROW - 4}">{label}</text></g>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _colour(frame: str) -> str:
    """A warm colour that stays the same for a frame across graphs."""
    h = hashlib.blake2s(frame.encode(), digest_size=2).digest()
    return f"rgb({205 + h[0] % 50},{80 + h[1] % 130},{40 + h[0] % 40})"
