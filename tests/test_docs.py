"""The documentation as a reader sees it: the site builds with --strict, every page renders, every figure it
shows exists, and the examples on the pages run.

The build runs the docs hook, which generates the figures by the theory checks' own ``plot()`` (fast preset)
when they are missing — so this test is ``slow``. Rendering uses headless Chromium (Debian ``chromium``)
when it is installed; the structural checks run without it.
"""

import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs).get("src", ""))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return out


def _pages(site):
    return sorted(p for p in site.rglob("index.html") if "assets" not in p.parts and p.parent.name != "404")


@pytest.mark.slow
def test_every_page_is_built_with_content_and_every_figure_exists(site):
    pages = _pages(site)
    expected = ["getting-started", "simulation", "optim", "nn", "wasserstein", "benchmarks", "api", "theory"]
    built = {p.parent.relative_to(site).as_posix() for p in pages}
    for name in expected:
        assert name in built, f"page {name} missing from the site: {sorted(built)}"
    for page in pages:
        html = page.read_text()
        assert "<article" in html and len(re.sub(r"<[^>]+>", "", html)) > 200, page
        parser = _Images()
        parser.feed(html)
        for src in parser.sources:
            if src.startswith(("http:", "https:", "data:")):
                continue
            target = (page.parent / src).resolve()
            assert target.is_file() and target.stat().st_size > 1000, f"{page}: figure {src} missing"
    theory_pages = [p for p in pages if p.parent.parent.name == "theory"]
    assert len(theory_pages) >= 9
    assert all("<img" in p.read_text() for p in theory_pages), "every theory page shows its figure"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")
def test_pages_render_in_headless_chromium(site, tmp_path):
    for page in _pages(site):
        dom = subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={tmp_path}",
                "--dump-dom",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert "<article" in dom.stdout and "md-content" in dom.stdout, page


@pytest.mark.slow
def test_getting_started_example_runs(tmp_path):
    text = (ROOT / "docs" / "getting-started.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "the getting-started page has a Python example"
    run = subprocess.run(
        [sys.executable, "-c", blocks[0]], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "convergence.png").stat().st_size > 1000
    slope = float(re.search(r"M\^(-?[\d.]+)", run.stdout).group(1))
    assert -1.2 < slope < -0.8  # E W2² ~ 1/M in one dimension


@pytest.mark.slow
def test_readme_example_runs(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert blocks, "the README has a Python example"
    run = subprocess.run(
        [sys.executable, "-c", blocks[0]], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "tensor(" in run.stdout  # the magnetisation per replica is printed
