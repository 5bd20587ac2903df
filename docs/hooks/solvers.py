"""mkdocs hook: the solver table of ``docs/solvers.md``, read from the solvers themselves.

The line ``<!-- solver-table -->`` on a page becomes a table of every solver ``meanfield.stepping.solvers.get_solver``
knows (``SOLVERS`` and the kinetic ``SPLITTINGS``): its calculus, its strong and weak order per noise type
(the ``strong_orders`` / ``weak_orders`` each solver declares, which ``Solver.strong_order(noise)`` returns
and ``tests/stepping/solvers/test_euler.py`` measures), the Lévy area it needs and whether it accepts Rademacher noise. The
page cannot drift from the code: a new solver or a changed order shows up at the next build.
"""

from __future__ import annotations

MARKER = "<!-- solver-table -->"
NOISES = ("additive", "diagonal", "general")


def _order(value) -> str:
    if value is None:
        return "—"
    return {0.5: "½", 1.0: "1", 1.5: "1.5", 2.0: "2"}.get(float(value), f"{value:g}")


def solver_table() -> str:
    from meanfield.stepping.solvers import SOLVERS, SPLITTINGS, get_solver
    from meanfield.stepping.solvers.torchsde import TORCHSDE_METHODS

    rows = [
        "| name | class | calculus | strong order (additive / diagonal / general) "
        "| weak order (additive / diagonal / general) | Lévy area | Rademacher noise |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in [*SOLVERS, *SPLITTINGS]:
        solver = get_solver(name)
        method = TORCHSDE_METHODS.get(getattr(solver, "method", ""))
        calculus = "Itô" if method is None or method.sde_type == "ito" else "Stratonovich"
        strong = " / ".join(_order(solver.strong_orders.get(n)) for n in NOISES)
        weak = " / ".join(_order(solver.weak_orders.get(n)) for n in NOISES)
        levy = method.levy_area if method is not None and method.levy_area != "none" else "—"
        rademacher = "no" if getattr(solver, "needs_gaussian", True) else "yes"
        rows.append(
            f"| `{name}` | `{type(solver).__name__}` | {calculus} | {strong} | {weak} | {levy} | {rademacher} |"
        )
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, solver_table())
    return markdown
