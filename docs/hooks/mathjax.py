"""mkdocs hook: serve MathJax from the installed docs extra, so that no page loads anything from a CDN.

Formulas are written ``\\(…\\)`` inline and ``\\[…\\]`` (or ``$$…$$``) on their own lines; ``pymdownx.arithmatex``
in generic mode wraps each in ``<span class="arithmatex">`` / ``<div class="arithmatex">`` with ``\\(…\\)`` /
``\\[…\\]`` delimiters, and MathJax typesets them in the reader's browser (``docs/javascripts/mathjax.js`` is
its configuration). MathJax comes from the ``django-static-mathjax`` wheel on PyPI: an unmodified MathJax 3
build, installed as a top-level ``mathjax`` package of static files (no dependencies; nothing of Django is
imported or needed).

The pages load ``tex-svg-full.js``: every TeX extension built in and SVG output, so typesetting needs no further
script and no font file. MathJax's menu loads more on demand (Accessibility → Explorer: ``a11y/``, ``sre/``,
``input/mml.js``), from the folder of that script: this hook therefore adds the whole ``es5/`` folder to the site,
less the other ready-made combined components beside it (``tex-chtml.js``, ``mml-svg.js``, …), which no page loads.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

SITE_DIR = "javascripts/vendor/mathjax"  # mkdocs.yml's extra_javascript loads SITE_DIR/ENTRY
ENTRY = "tex-svg-full.js"
# the top-level files kept: the entry and the loader's parts (the other top-level files are combined components)
TOP_LEVEL = {ENTRY, "core.js", "loader.js", "startup.js"}


def mathjax_es5() -> Path:
    """The ``es5/`` folder of the installed MathJax (``django-static-mathjax``), with ``ENTRY`` in it."""
    try:
        es5 = Path(str(resources.files("mathjax") / "static" / "mathjax" / "es5"))
    except ModuleNotFoundError:
        es5 = None
    if es5 is None or not (es5 / ENTRY).is_file():
        raise PluginError(
            "MathJax is not installed, so the formulas would show as raw TeX: pip install -e '.[docs]' "
            f"(django-static-mathjax provides mathjax/static/mathjax/es5/{ENTRY})"
        )
    return es5


def on_files(files, config, **kwargs):
    es5 = mathjax_es5()
    for path in sorted(es5.rglob("*")):
        relative = path.relative_to(es5)
        if not path.is_file() or (len(relative.parts) == 1 and relative.name not in TOP_LEVEL):
            continue
        files.append(File.generated(config, f"{SITE_DIR}/{relative.as_posix()}", abs_src_path=str(path)))
    return files
