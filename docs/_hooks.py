"""mkdocs hook: generate the figures the pages show, by the same code users run, before the build.

Figures are never committed. ``meanfield figures`` (what this hook calls) writes ``docs/figures/*.png``
from every theory check's ``plot()`` (fast preset), the overview (the landing page's picture) and the
quickstart; a figure already there is kept, so ``mkdocs serve`` does not rerun the checks on every edit
(delete ``docs/figures`` to refresh). The benchmark figures (``benchmarks/_peers_figure.py``) are drawn from
the committed results files every build (a fraction of a second).
"""

from __future__ import annotations

from pathlib import Path


def on_pre_build(config, **kwargs) -> None:
    from meanfield.studies.figures import generate

    figures = Path(config["docs_dir"]) / "figures"
    generate(figures, preset="fast", keep_existing=True)
    _benchmark_figures(figures)


def _benchmark_figures(figures: Path) -> None:
    """``benchmarks/peers.py``'s figure of each machine, drawn from its results file."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("_peers_figure", root / "benchmarks" / "_peers_figure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for results in sorted((root / "benchmarks" / "results").glob("*/peers.md")):
        module.draw(results, figures / f"peers-{results.parent.name}.png")
