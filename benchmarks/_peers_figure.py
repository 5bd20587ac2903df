"""The figure of ``benchmarks/peers.py``, drawn from its results file (figures are never committed: the docs hook
draws it at build time, ``docs/_hooks.py``).

Each ``### <problem>`` table of a ``peers.md`` becomes one panel: every engine that ran, its CPU time per step
on a log scale.
"""

from __future__ import annotations

from pathlib import Path


def parse(text: str) -> list[tuple[str, list[tuple[str, float]]]]:
    """``[(problem, [(engine, µs per step CPU), …]), …]`` from a ``peers.md`` (engines skipped: left out)."""
    panels: list[tuple[str, list[tuple[str, float]]]] = []
    for line in text.splitlines():
        if line.startswith("### "):
            panels.append((line[4:].strip(), []))
        elif panels and line.startswith("| ") and not line.startswith("| engine"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            try:
                panels[-1][1].append((cells[0], float(cells[1])))
            except (IndexError, ValueError):  # a skipped engine ("—") or the separator row
                continue
    return [(title, rows) for title, rows in panels if rows]


def draw(results_md: Path, png: Path) -> Path:
    """Draw the figure of the results file ``results_md`` into ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    panels = parse(Path(results_md).read_text())
    # one panel a row, 8.4 in wide: at the page's 690-px column its 9-pt labels show at about 9 pt (issue 52's rule,
    # tests/e2e/test_docs.py); the engines' names need the width
    rows = max(1, len(panels))
    fig, axes = plt.subplots(rows, 1, figsize=(8.4, 2.9 * rows), squeeze=False)
    for ax, (title, bars) in zip(axes.flat, panels):
        names = [name for name, _ in bars][::-1]
        colours = ["tab:blue" if "meanfield" in n else "tab:gray" for n in names]
        ax.barh(names, [us for _, us in bars][::-1], color=colours)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("µs per step (CPU time, log scale)")
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="both", labelsize=9)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
