"""mkdocs hook: search on a site opened from disk, with nothing loaded from a CDN.

Material's ``offline`` plugin (mkdocs.yml) ships the search index as ``search/search_index.js`` and makes every
page load the ``iframe-worker`` shim, which runs the search worker where browsers refuse a Web Worker
(``file://``). The theme loads that shim from unpkg.com; this hook points the pages at the copy served by
the site instead: ``docs/javascripts/vendor/iframe-worker/shim.js``, the unmodified ``shim/index.js`` of the
npm package ``iframe-worker`` 1.0.4 (MIT, ``LICENSE`` beside it).
"""

from __future__ import annotations

import posixpath

CDN = "https://unpkg.com/iframe-worker/shim"
LOCAL = "javascripts/vendor/iframe-worker/shim.js"


def _local(output: str, url: str) -> str:
    """``output`` with the CDN shim replaced by the site's copy, relative to the page at ``url``."""
    if CDN not in output:
        return output
    depth = posixpath.dirname(url.split("#")[0])
    relative = posixpath.relpath(LOCAL, depth or ".")
    return output.replace(CDN, relative)


def on_post_page(output: str, page, config, **kwargs) -> str:
    return _local(output, page.url)


def on_post_template(output: str, template_name: str, config, **kwargs) -> str:
    return _local(output, template_name)  # 404.html, at the site's root
