"""mkdocs hook: the gallery's figures on a site built with ``use_directory_urls: false``.

mkdocs-gallery writes each figure as ``<img src="images/x.png" srcset="../images/x.png">``: the ``srcset``
assumes the example is served as ``plot_x/index.html``. Browsers prefer ``srcset``, so with ``plot_x.html``
(mkdocs.yml) the figure would not load; this hook makes ``srcset`` relative to the page as ``src`` is.
"""

from __future__ import annotations

import re

SRCSET = re.compile(r'srcset="\.\./images/')


def on_post_page(output: str, page, config, **kwargs) -> str:
    if page.file.src_uri.startswith("generated/gallery/"):
        output = SRCSET.sub('srcset="images/', output)
    return output
