"""What a result shows in a notebook: a short text (a few lines, never a tensor) and a small HTML table.

The result classes ([`Trajectory`][meanfield.stepping.simulate.Trajectory], [`StudyResult`][meanfield.studies.in_memory.StudyResult], …) build
their ``__repr__`` and ``_repr_html_`` from these pieces, and their ``to_pandas`` from ``dataframe``.
"""

from __future__ import annotations

import html
import numbers
from collections.abc import Mapping, Sequence

import torch

__all__ = [
    "MAX_ROWS",
    "dataframe",
    "fields_html",
    "html_block",
    "number",
    "shortlist",
    "paragraph",
    "rows_html",
    "rows_text",
    "seconds",
]

MAX_ROWS = 6
"""Rows of a table that a repr shows (the first ones; the rest are counted)."""


def number(value: object, digits: int = 4) -> str:
    """A cell: a float to ``digits`` significant digits, a one-element tensor as its number, ``None`` empty."""
    if torch.is_tensor(value) and value.numel() == 1:
        value = value.item()
    if value is None:
        return ""
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):  # float, numpy floats
        return f"{float(value):.{digits}g}"
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)}"
    return str(value)


def seconds(value: float) -> str:
    """A duration: ``12.3 s`` to a tenth from about 1 s up, two significant digits below (``0.037 s``, not
    ``0.0 s``), milliseconds under 0.01 s (``1.2 ms``)."""
    if value >= 0.995:
        return f"{value:.1f} s"
    return f"{value:.2g} s" if value >= 0.01 else f"{value * 1e3:.2g} ms"


def shortlist(values: Sequence[object], most: int = MAX_ROWS, digits: int = 4) -> str:
    """``a, b, c`` — or the first ``most − 1``, ``…`` and the last one when there are more."""
    cells = [number(v, digits) for v in values]
    return ", ".join(cells if len(cells) <= most else [*cells[: most - 1], "…", cells[-1]])


def _columns(rows: Sequence[Mapping], columns: Sequence[str], most: int) -> list[list[str]]:
    return [[number(row.get(c)) for c in columns] for row in rows[:most]]


def rows_text(
    rows: Sequence[Mapping], columns: Sequence[str], most: int = MAX_ROWS, indent: str = "  "
) -> str:
    """The first ``most`` rows as aligned text columns under a header, then how many rows are left out."""
    cells = [list(columns), *_columns(rows, columns, most)]
    widths = [max(len(line[k]) for line in cells) for k in range(len(columns))]
    lines = [
        indent + "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells
    ]
    if len(rows) > most:
        lines.append(f"{indent}… {_more(len(rows) - most)}")
    return "\n".join(lines)


def rows_html(rows: Sequence[Mapping], columns: Sequence[str], most: int = 2 * MAX_ROWS) -> str:
    """The first ``most`` rows as an HTML table, then how many rows are left out."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>"
        for line in _columns(rows, columns, most)
    )
    more = f"<p>… {_more(len(rows) - most)}</p>" if len(rows) > most else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def fields_html(fields: Sequence[tuple[str, str]]) -> str:
    """Name–value pairs as a two-column HTML table."""
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in fields)
    return f"<table><tbody>{body}</tbody></table>"


def paragraph(text: str) -> str:
    """``text`` as an HTML paragraph (escaped)."""
    return f"<p>{html.escape(text)}</p>"


def html_block(title: str, *parts: str) -> str:
    """A titled block: the title in bold (escaped), then the HTML ``parts``."""
    return f"<div><strong>{html.escape(title)}</strong>{''.join(parts)}</div>"


def dataframe(rows: Sequence[Mapping], columns: Sequence[str]):
    """``pandas.DataFrame(rows)`` with the columns in this order (a missing cell is NaN or None)."""
    try:
        import pandas
    except ImportError:
        raise ModuleNotFoundError("to_pandas needs pandas: pip install 'meanfield-sde[pandas]'") from None
    return pandas.DataFrame(list(rows), columns=list(columns))


def _more(n: int) -> str:
    """``1 more row``, ``n more rows``."""
    return f"{n} more row{'s' if n != 1 else ''}"
