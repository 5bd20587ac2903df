"""mkdocs hook: the formulas of the notebooks' markdown cells, typeset like every other page's.

mkdocs-jupyter renders a markdown cell's ``$…$`` and ``$$…$$`` as text, for a MathJax that reads dollar
delimiters anywhere on the page; the site's MathJax (``docs/javascripts/mathjax.js``) typesets only what
``pymdownx.arithmatex`` marks. This hook marks the notebooks' formulas the same way: ``$$x$$`` becomes
``<span class="arithmatex">\\[x\\]</span>`` and ``$x$`` ``<span class="arithmatex">\\(x\\)</span>``, in
markdown cells only and never inside ``<code>`` or ``<pre>``.
"""

from __future__ import annotations

import re

CELL = re.compile(r'(<div class="[^"]*jp-RenderedMarkdown[^"]*"[^>]*>)(.*?)(</div>)', re.S)
CODE = re.compile(r"(<code.*?</code>|<pre.*?</pre>)", re.S)
DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
INLINE = re.compile(r"(?<![\\$])\$(?!\s)([^$]+?)(?<!\s)\$")


def mark_math(html: str) -> str:
    """``html`` (a markdown cell's HTML) with its TeX formulas in arithmatex spans."""
    parts = CODE.split(html)
    for k in range(0, len(parts), 2):  # the even parts are outside code
        text = DISPLAY.sub(lambda m: f'<span class="arithmatex">\\[{m.group(1)}\\]</span>', parts[k])
        parts[k] = INLINE.sub(lambda m: f'<span class="arithmatex">\\({m.group(1)}\\)</span>', text)
    return "".join(parts)


def on_post_page(output: str, page, config, **kwargs) -> str:
    if page.file.src_uri.endswith(".ipynb"):
        output = CELL.sub(lambda m: m.group(1) + mark_math(m.group(2)) + m.group(3), output)
    return output
