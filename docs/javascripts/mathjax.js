// MathJax configuration for pymdownx.arithmatex in generic mode (after Material for MkDocs' recipe). MathJax
// itself is served by the site (docs/hooks/mathjax.py copies it from the django-static-mathjax wheel): no CDN.
// MathJax typesets the page once it has loaded. The theme's navigation.instant (not enabled) swaps pages without
// a reload and would need Material's `document$.subscribe(() => MathJax.typesetPromise())` here as well.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    // typeset only what arithmatex marked as math, never a `\(` in code or prose
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
  svg: { fontCache: "local" }, // each formula carries its glyphs: no shared cache element to lose
};
