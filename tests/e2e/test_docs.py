"""The documentation as a reader sees it: the site builds with --strict, every page renders, every figure it
shows exists, and the examples on the pages run.

The build runs the docs hook, which generates the figures by the theory checks' own ``plot()`` (fast preset)
when they are missing — so this test is ``slow``. Rendering uses headless Chromium (Debian ``chromium``)
when it is installed; the structural checks run without it. Formulas are typeset by MathJax, served by the
site itself (``docs/hooks/mathjax.py``): the render test asserts that every formula of a page became MathJax
output, with every other host unreachable, and that the same check fails with MathJax removed.
"""

import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

import meanfield

ROOT = Path(__file__).resolve().parents[2]
MATH_PAGE = "testing"  # a page known to hold formulas (docs/testing.md, "The documentation site")
# pages a reader meets first, whose formulas must be typeset rather than left in code spans
READER_PAGES = [
    "index",
    "getting-started",
    "simulation",
    "theory/chain_bias",
    "theory/token_dynamics",
    "notebooks/simulate",
    "experiments/particle_attention",
    "experiments/feature_particles",
    "running",  # its three formula-like code spans are output it quotes: a column name, a marker
]
# pages whose formulas were moved out of code spans (issue 52): not one formula-like code span is left, the
# Greek placeholders of their code written as names (`Alignment(kappa)`); MathJax typesets every formula
NO_FORMULA_CODE_PAGES = [
    "benchmarks",
    "data",
    "design",
    "kinetic",
    "nn",
    "optim",
    "testing",
    "wasserstein",
    "theory/chain_bias",
    "theory/desai_zwanzig",
    "theory/free_energy_flow",
    "theory/gibbs_double_well",
    "theory/keller_segel",
    "theory/langevin_optimizer",
    "theory/particle_attention",
    "theory/rate_coverage",
    "theory/sphere_transition",
    "theory/token_dynamics",
]
# a code span that holds a formula: Greek letters, math operators, Unicode sub/superscripts, or a TeX group
FORMULA_CODE = re.compile(r"[α-ωΓΔΘΛΞΠΣΦΨΩ−·≤≥∈∉∑∫∇∂√‖²³⁴⁻₀₁₂ᵢⱼₙ∝≈⟨⟩]|[_^]\{")
MATHJAX_SCRIPT = re.compile(r'<script src="[^"]*javascripts/vendor/mathjax/tex-svg-full\.js"></script>')
TEX_DELIMITERS = ("\\(", "\\)", "\\[", "\\]", "$$")


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs).get("src", ""))


class _Formulas(HTMLParser):
    """Each ``arithmatex`` element (one formula) of a page: its text, whether it holds MathJax output
    (``mjx-container``) and whether MathJax marked a TeX error in it."""

    def __init__(self):
        super().__init__()
        self.formulas = []
        self._open = None  # (tag, nesting depth of that tag) of the formula being read

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self._open is None:
            if "arithmatex" in (attrs.get("class") or "").split():
                self.formulas.append({"text": "", "typeset": False, "error": False})
                self._open = [tag, 1]
            return
        if tag == self._open[0]:
            self._open[1] += 1
        formula = self.formulas[-1]
        formula["typeset"] |= tag == "mjx-container"
        formula["error"] |= tag == "merror" or "data-mjx-error" in attrs

    def handle_endtag(self, tag):
        if self._open is not None and tag == self._open[0]:
            self._open[1] -= 1
            if self._open[1] == 0:
                self._open = None

    def handle_data(self, data):
        if self._open is not None:
            self.formulas[-1]["text"] += data


class _CodeSpans(HTMLParser):
    """The text of each inline ``<code>`` (not inside a ``<pre>`` block) of a page."""

    def __init__(self):
        super().__init__()
        self.spans, self._pre, self._code = [], 0, None

    def handle_starttag(self, tag, attrs):
        if tag == "pre":
            self._pre += 1
        elif tag == "code" and not self._pre:
            self._code = ""

    def handle_endtag(self, tag):
        if tag == "pre":
            self._pre -= 1
        elif tag == "code" and self._code is not None:
            self.spans.append(self._code)
            self._code = None

    def handle_data(self, data):
        if self._code is not None:
            self._code += data


def formula_code_spans(html):
    """The inline code spans of ``html`` that look like formulas (``FORMULA_CODE``): what a page shows as
    literal text where it should typeset math."""
    parser = _CodeSpans()
    parser.feed(html)
    return [s for s in parser.spans if FORMULA_CODE.search(s)]


def math_report(dom):
    """``(typeset, untypeset, formula_code)`` of a page's DOM after its scripts ran: formulas MathJax typeset,
    formulas left raw, and formula-like code spans."""
    found = formulas(dom)
    raw = untypeset_formulas(dom)
    return len(found) - len(raw), len(raw), len(formula_code_spans(dom))


def math_is_typeset(dom, share=0.8):
    """Whether a page reads as typeset math: some formulas, all typeset, and at least ``share`` of its
    formula-like items typeset (the rest are code spans with a Greek name or an operator in them)."""
    typeset, raw, code = math_report(dom)
    return typeset > 0 and raw == 0 and typeset >= share * (typeset + code)


def formulas(html):
    parser = _Formulas()
    parser.feed(html)
    return parser.formulas


def untypeset_formulas(html):
    """The formulas of ``html`` (a page's DOM) that MathJax did not typeset: no ``mjx-container``, a TeX
    delimiter left in the text, or a TeX error. Empty when every formula was typeset."""
    return [
        f["text"].strip()[:80] or "(empty)"
        for f in formulas(html)
        if not f["typeset"] or f["error"] or any(d in f["text"] for d in TEX_DELIMITERS)
    ]


class _Remote(HTMLParser):
    def __init__(self):
        super().__init__()
        self.urls = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        url = attrs.get("src") if tag in ("script", "img", "iframe") else None
        if tag == "link" and set((attrs.get("rel") or "").split()) - {"canonical", "alternate"}:
            url = attrs.get("href")
        if url and url.startswith(("http:", "https:", "//")):
            self.urls.append(url)


def remote_resources(html):
    """The URLs on other hosts that a browser loads when it shows ``html`` (scripts, stylesheets, fonts,
    preconnects, images, frames); links a reader may follow are not loaded and not listed."""
    parser = _Remote()
    parser.feed(html)
    return parser.urls


def test_untypeset_formulas_tells_raw_tex_from_mathjax_output():
    raw = '<p>so <span class="arithmatex">\\(x_T = \\sqrt{2}\\)</span></p><div class="arithmatex">\\[\na\n\\]</div>'
    assert untypeset_formulas(raw) == ["\\(x_T = \\sqrt{2}\\)", "\\[\na\n\\]"]
    typeset = (
        '<span class="arithmatex"><mjx-container class="MathJax" jax="SVG"><svg><g><path d="M1"></path></g>'
        "</svg><mjx-assistive-mml><math><mi>x</mi></math></mjx-assistive-mml></mjx-container></span>"
    )
    assert untypeset_formulas(typeset) == []
    assert len(formulas(typeset + raw)) == 3
    assert untypeset_formulas(typeset.replace("<g>", '<g data-mjx-error="Undefined control sequence">')) != []
    # MathJax's output left beside the raw TeX (a half-typeset formula) is not typeset either
    half = '<span class="arithmatex"><mjx-container></mjx-container>\\(x\\)</span>'
    assert untypeset_formulas(half) == ["\\(x\\)"]
    assert formulas("<p>no math, a \\( in prose</p>") == []


def test_math_is_typeset_counts_formulas_against_formula_like_code_spans():
    typeset = '<span class="arithmatex"><mjx-container class="MathJax"><svg></svg></mjx-container></span>'
    raw = '<span class="arithmatex">\\(x_T\\)</span>'
    assert formula_code_spans(
        "<p><code>ρ_M = 1/M Σ δ</code> <code>x_{n+1}</code> <code>meanfield.simulate</code></p>"
        "<pre><code>θ ← θ − η g</code></pre>"
    ) == ["ρ_M = 1/M Σ δ", "x_{n+1}"]
    assert math_report(f"<p>{typeset * 9}<code>β_t</code></p>") == (9, 0, 1)
    assert math_is_typeset(f"<p>{typeset * 9}<code>β_t</code></p>")
    # negative controls: formulas left in code spans, a formula MathJax did not typeset, no math at all
    assert not math_is_typeset(f"<p>{typeset * 2}{'<code>e^{−ηaT}</code>' * 3}</p>")
    assert not math_is_typeset(f"<p>{typeset * 9}{raw}</p>")
    assert not math_is_typeset("<p><code>meanfield.simulate</code></p>")


def test_remote_resources_lists_what_a_page_loads_from_another_host():
    page = (
        '<link rel="preconnect" href="https://fonts.gstatic.com" crossorigin>'
        '<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">'
        '<link rel="stylesheet" href="../assets/main.css"><link rel="canonical" href="https://example.org/a/">'
        '<script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>'
        '<script src="../javascripts/vendor/mathjax/tex-svg-full.js"></script>'
        '<a href="https://squidfunk.github.io/mkdocs-material/">Material</a><img src="//cdn.example/x.png">'
    )
    assert remote_resources(page) == [
        "https://fonts.gstatic.com",
        "https://fonts.googleapis.com/css?family=Roboto",
        "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js",
        "//cdn.example/x.png",
    ]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
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
    """Every page of the site (``use_directory_urls: false``: ``page.html``, ``theory/chain_bias.html``),
    without the 404 page, the theme's assets and MathJax's files."""
    return sorted(
        p
        for p in site.rglob("*.html")
        if not {"assets", "javascripts", "search"} & set(p.relative_to(site).parts) and p.name != "404.html"
    )


def _name(site, page):
    return page.relative_to(site).with_suffix("").as_posix()


@pytest.mark.slow
def test_every_page_is_built_with_content_and_every_figure_exists(site):
    pages = _pages(site)
    expected = [
        "getting-started",
        "simulation",
        "solvers",
        "optim",
        "nn",
        "wasserstein",
        "benchmarks",
        "api",
        "api/simulation",
        "theory/index",
        "cite",
        "generated/gallery/index",
        "notebooks/simulate",
    ]
    built = {_name(site, p) for p in pages}
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
    # an example that failed shows its traceback on its page; mkdocs-gallery caches a failed example's page
    # by its MD5 too, so a later build passes with the traceback still shown (seen with a stale install)
    ran = [p for p in pages if _name(site, p).startswith(("generated/gallery/plot_", "notebooks/"))]
    assert len(ran) >= 10, [_name(site, p) for p in ran]  # 8 gallery examples, 2 notebooks
    for page in ran:
        assert "Traceback (most recent call last)" not in page.read_text(), f"{page}: the example failed"
    theory_pages = [p for p in pages if p.parent.name == "theory" and p.name != "index.html"]
    assert len(theory_pages) >= 9
    assert all("<img" in p.read_text() for p in theory_pages), "every theory page shows its figure"


@pytest.mark.slow
def test_pages_load_nothing_from_another_host_and_mathjax_is_served_by_the_site(site):
    for page in [*_pages(site), site / "404.html"]:
        assert remote_resources(page.read_text()) == [], f"{page} loads from another host (a CDN)"
    math_pages = [p for p in _pages(site) if formulas(p.read_text())]
    assert site / f"{MATH_PAGE}.html" in math_pages
    for page in math_pages:
        html = page.read_text()
        assert len(MATHJAX_SCRIPT.findall(html)) == 1, f"{page} has formulas but does not load MathJax"
        assert untypeset_formulas(html) != [], "the built HTML holds raw TeX, typeset only in the browser"
    assert (site / "javascripts" / "vendor" / "mathjax" / "tex-svg-full.js").stat().st_size > 1_000_000


def _chromium_dom(page, profile, query=""):
    """The DOM of ``page`` once headless Chromium has loaded it and run its scripts, with every other host
    unreachable (so nothing on the page can come from a CDN)."""
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
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--virtual-time-budget=15000",  # let MathJax and the search finish (virtual time: no real wait)
            f"--user-data-dir={profile}",
            "--dump-dom",
            page.as_uri() + query,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")
def test_pages_render_in_headless_chromium(site, tmp_path):
    typeset = {}
    for page in _pages(site):
        dom = _chromium_dom(page, tmp_path)
        assert "<article" in dom and "md-content" in dom, page
        expected = len(formulas(page.read_text()))
        if expected:
            assert len(formulas(dom)) == expected, page
            assert untypeset_formulas(dom) == [], f"{page}: formulas left as raw TeX"
            typeset[_name(site, page)] = expected
    assert typeset.get(MATH_PAGE, 0) >= 2, typeset  # the inline and the display formula of docs/testing.md

    # negative control: the same page without the MathJax script keeps its formulas raw, and the check says so
    page = site / f"{MATH_PAGE}.html"
    html, removed = MATHJAX_SCRIPT.subn("", page.read_text())
    assert removed == 1
    bare = page.with_name("without-mathjax.html")
    bare.write_text(html)
    try:
        dom = _chromium_dom(bare, tmp_path)
    finally:
        bare.unlink()
    assert "<article" in dom and "<mjx-container" not in dom
    assert len(untypeset_formulas(dom)) == typeset[MATH_PAGE]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")
def test_reader_pages_typeset_their_formulas_rather_than_showing_code_spans(site, tmp_path):
    """The pages a reader meets first show their formulas typeset: in the DOM after MathJax ran, every formula
    is MathJax output and formula-like code spans are at most a fifth of the formula-like items; on
    ``NO_FORMULA_CODE_PAGES`` there are none. Negative control: the same page without the MathJax script fails
    the same check (and ``test_math_is_typeset_counts_formulas_against_formula_like_code_spans``)."""
    reports = {}
    for name in dict.fromkeys(READER_PAGES + NO_FORMULA_CODE_PAGES):
        dom = _chromium_dom(site / f"{name}.html", tmp_path)
        reports[name] = math_report(dom)
        assert math_is_typeset(dom), f"{name}: (typeset, raw, formula code spans) = {reports[name]}"
        if name in NO_FORMULA_CODE_PAGES:
            assert formula_code_spans(dom) == [], f"{name}: formulas left in code spans"
    assert sum(r[0] for r in reports.values()) >= 100, reports  # measured 2026-12-06: 17 + 5 + 60 + 47 + …

    page = site / f"{READER_PAGES[0]}.html"
    html, removed = MATHJAX_SCRIPT.subn("", page.read_text())
    assert removed == 1
    bare = page.with_name("reader-without-mathjax.html")
    bare.write_text(html)
    try:
        dom = _chromium_dom(bare, tmp_path)
    finally:
        bare.unlink()
    assert not math_is_typeset(dom) and math_report(dom)[0] == 0


RAW_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`?")


def test_raw_role_pattern_finds_rest_roles():
    assert RAW_ROLE.findall("see :class:`Trajectory` and :func:`~meanfield.simulate`") == [
        ":class:`",
        ":func:`",
    ]
    assert RAW_ROLE.findall('see <a href="#meanfield.Trajectory"><code>Trajectory</code></a>') == []


def test_docstrings_carry_no_raw_rest_roles():
    """The fast half of the check below, without a docs build: no module of the package writes a reST role
    (the slow test sees it only on the built page; CI caught ``:func:`lm_splits``` that way, after 20 minutes)."""
    package = Path(meanfield.__file__).parent
    raw = {
        str(p.relative_to(package)): n
        for p in sorted(package.rglob("*.py"))
        if (n := len(RAW_ROLE.findall(p.read_text(encoding="utf-8"))))
    }
    assert raw == {}, f"reST roles left (write [`X`][meanfield.path.X]): {raw}"


SNIPPET = re.compile(r'^--8<-- "([^"]+)"$')  # pymdownx.snippets' include line, base path the repository


def snippet_problems(text: str) -> list[str]:
    """The lines of a page that mention the snippet marker ``--8<--`` and are not an include of an existing
    file (``path`` or ``path:section``, relative to the repository)."""
    problems = []
    for n, line in enumerate(text.splitlines(), 1):
        if "--8<--" not in line:
            continue
        include = SNIPPET.match(line.strip())
        if include is None or not (ROOT / include.group(1).split(":")[0]).is_file():
            problems.append(f"{n}: {line.strip()}")
    return problems


def test_snippet_problems_finds_a_marker_that_is_not_an_include():
    good = '--8<-- "docs/index.md"\n'
    assert snippet_problems(good) == []
    # negative controls: the marker typeset as math (issue 52's TeX pass did that to six includes: each page
    # showed the marker and the path, not the table), and an include of a file that is not there
    assert snippet_problems('$--8<--$ "docs/index.md"\n') == ['1: $--8<--$ "docs/index.md"']
    assert snippet_problems('--8<-- "docs/none.md"\n') == ['1: --8<-- "docs/none.md"']


def test_every_snippet_marker_on_a_page_includes_a_file():
    """mkdocs' strict build does not see a marker that is no longer an include line: it renders as text."""
    problems = {
        str(page.relative_to(ROOT)): found
        for page in sorted((ROOT / "docs").rglob("*.md"))
        if (found := snippet_problems(page.read_text(encoding="utf-8")))
    }
    assert problems == {}


@pytest.mark.slow
def test_api_pages_show_no_raw_rest_roles(site):
    """The docstrings cross-reference in the syntax mkdocstrings renders (``[`X`][meanfield.x.X]``, resolved by
    autorefs, whose unresolved targets fail the --strict build); no ``:class:`X``` is left as text."""
    pages = sorted((site / "api").glob("*.html"))
    assert len(pages) >= 15
    raw = {p.name: len(RAW_ROLE.findall(re.sub(r"<[^>]+>", "", p.read_text()))) for p in pages}
    assert sum(raw.values()) == 0, raw


def png_width(path):
    """The width in pixels of a PNG, from its IHDR chunk."""
    return _png_header_width(path.read_bytes()[:24], path)


def _png_header_width(header, where):
    assert header[:8] == b"\x89PNG\r\n\x1a\n", where
    return int.from_bytes(header[16:20], "big")


PAGE_WIDTH_PX = 8.4 * 130  # plotting.page_layout: at most 8.4 in at 130 dpi
IMG_SRC = re.compile(r"<img\b[^>]*?\bsrc=\"([^\"]+)\"")


def page_images(site):
    """``{(page, source): width in px}`` of every PNG an ``<img>`` of a page shows: the files under the site
    (the committed ``docs/assets``, the build's ``figures/``, the gallery's) and the images a notebook page
    carries inline (``data:image/png;base64,…``). Other formats (the theme's SVG badges) are left out."""
    import base64
    from urllib.parse import unquote

    widths = {}
    for page in _pages(site):
        for k, src in enumerate(IMG_SRC.findall(page.read_text(encoding="utf-8"))):
            if src.startswith("data:image/png;base64,"):
                header = base64.b64decode(src.split(",", 1)[1][:32])[:24]
                widths[(_name(site, page), f"inline image {k}")] = _png_header_width(header, page)
            elif not re.match(r"[a-z]+:", src) and unquote(src.split("#")[0]).endswith(".png"):
                widths[(_name(site, page), src)] = png_width(page.parent / unquote(src.split("#")[0]))
    return widths


def test_page_images_finds_every_png_a_page_shows(tmp_path):
    """The negative control of the width test below, without a docs build: a page showing the old 2080-px
    token_dynamics_panels.png (five panels in a row) and an inline notebook image 1638 px wide is flagged, the
    page-width figure beside them is not, and an SVG is skipped."""
    import base64

    def png(width):  # the signature and an IHDR chunk: all page_images reads
        return b"\x89PNG\r\n\x1a\n" + b"\0\0\0\rIHDR" + width.to_bytes(4, "big") + (400).to_bytes(4, "big")

    (tmp_path / "assets").mkdir()
    (tmp_path / "theory").mkdir()
    (tmp_path / "assets" / "wide.png").write_bytes(png(2080))
    (tmp_path / "assets" / "fits.png").write_bytes(png(1092))
    inline = base64.b64encode(png(1638)).decode()
    (tmp_path / "theory" / "page.html").write_text(
        '<p><img alt="a" src="../assets/wide.png" /><img src="../assets/fits.png">'
        f'<img src="data:image/png;base64,{inline}"><img src="../badge.svg"></p>'
    )
    widths = page_images(tmp_path)
    assert sorted(widths.values()) == [1092, 1638, 2080]
    too_wide = {key: w for key, w in widths.items() if w > PAGE_WIDTH_PX + 1}
    assert {src for (_, src) in too_wide} == {"../assets/wide.png", "inline image 2"}


@pytest.mark.slow
def test_every_figure_on_every_page_is_readable_at_the_page_width(site):
    """Every PNG a page shows (the build's figures, drawn by ``meanfield figures`` inside
    ``plotting.page_layout``; the committed ``docs/assets`` figures, drawn by the experiments' scripts under
    it; the gallery's and the notebooks' figures) is at most 8.4 in wide at 130 dpi, so on a 690-px content
    column 11-pt text shows at ≥ 9 pt (tests/studies/test_plotting.py has the arithmetic; the negative control is
    ``test_page_images_finds_every_png_a_page_shows``: the 2080-px row of five panels committed before)."""
    widths = page_images(site)
    assert len({src for (_, src) in widths}) >= 30  # figures/, assets/, the gallery's and notebooks' images
    assert any(page.startswith("notebooks/") for (page, _) in widths)
    too_wide = {key: w for key, w in widths.items() if w > PAGE_WIDTH_PX + 1}
    assert too_wide == {}, too_wide


def repeated_images(html):
    """The inline images (``data:image/png``) a page shows more than once: a notebook cell whose figure the
    inline backend showed and the cell's value showed again (``plotting.returned``)."""
    images = re.findall(r'<img\b[^>]*?\bsrc="data:image/png;base64,([^"]+)"', html)
    return [image[:40] for image in dict.fromkeys(images) if images.count(image) > 1]


def test_repeated_images_sees_a_figure_shown_twice():
    """Negative control of the notebook check below: the built convergence notebook before the fix showed its
    figure as ``Out[3]`` and again as the backend's display."""
    out = '<div class="jp-OutputArea-output"><img alt="" src="data:image/png;base64,{}"/></div>'
    assert repeated_images(out.format("iVBORw0KGgoAAA") + out.format("iVBORw0KGgoAAA")) == ["iVBORw0KGgoAAA"]
    assert repeated_images(out.format("iVBORw0KGgoAAA") + out.format("iVBORw0KGgoBBB")) == []


@pytest.mark.slow
def test_notebooks_show_each_figure_once(site):
    """The notebooks, executed by the build (mkdocs-jupyter, ``%matplotlib inline``), show each figure once:
    ``study.plot()`` as a cell's value, a figure of the cell's own by the backend, never both."""
    pages = sorted((site / "notebooks").glob("*.html"))
    assert len(pages) >= 2
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert "jp-RenderedImage" in html, f"{page.name}: no figure"
        assert repeated_images(html) == [], f"{page.name} shows a figure twice"


SEARCH_SHIM = re.compile(r'<script src="[^"]*javascripts/vendor/iframe-worker/shim\.js"></script>')


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")
def test_search_answers_on_a_site_opened_from_disk(site, tmp_path):
    """Opened from disk (file://, no server, every other host unreachable), the landing page's search answers
    a query (Material opens its search with ``?q=``): the offline plugin ships the index as a script and the
    site serves the worker shim (docs/hooks/offline_search.py). Negative control: without the shim the
    browser refuses the search worker on file:// and the search stays hidden, with no result."""
    page = site / "index.html"
    assert SEARCH_SHIM.search(page.read_text()), "the page does not load the site's own search shim"
    dom = _chromium_dom(page, tmp_path, query="?q=wasserstein")
    hits = dom.count("md-search-result__item")
    assert hits >= 3 and "matching documents" in dom, f"{hits} search results"

    html, removed = SEARCH_SHIM.subn("", page.read_text())
    assert removed == 1
    bare = page.with_name("index-without-shim.html")
    bare.write_text(html)
    try:
        dom = _chromium_dom(bare, tmp_path, query="?q=wasserstein")
    finally:
        bare.unlink()
    assert dom.count("md-search-result__item") == 0


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
