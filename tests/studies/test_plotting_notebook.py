"""A result's ``plot()`` in a notebook: the figure shows once (plotting.returned), not twice.

An in-process IPython shell with ``%matplotlib inline`` (matplotlib-inline's backend, as in Jupyter) runs the
cells; every image it shows is recorded, whether as the cell's value (``Out[n]``) or by the backend at the cell's
end. Skipped without IPython (the docs extra has it)."""

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch

pytest.importorskip("IPython")
pytest.importorskip("matplotlib_inline")

from IPython.core.interactiveshell import InteractiveShell  # noqa: E402


class _Shell(InteractiveShell):
    def enable_gui(self, gui=None):  # no event loop here: the inline backend needs none
        pass


@pytest.fixture(scope="module")
def notebook():
    """``run(cell) -> images shown``: one shell in ``%matplotlib inline`` for the module (IPython keeps one
    instance a process); the backend and rc restored after."""
    backend = matplotlib.get_backend()
    with matplotlib.rc_context():
        shell = _Shell.instance()
        shown = []
        shell.display_pub.publish = lambda data, metadata=None, **kw: shown.append(("display", data))
        shell.displayhook.write_format_data = lambda data, md=None: shown.append(("Out", data))

        def run(cell):
            shown.clear()
            result = shell.run_cell(cell)
            assert result.error_in_exec is None and result.error_before_exec is None, cell
            return [where for where, data in shown if "image/png" in data]

        run("%matplotlib inline")
        shell.user_ns.update(torch=torch, plt=plt)
        run(
            "import meanfield as mf\n"
            "from meanfield.metrics import Normal\n"
            "def sample(M, reps):  # (reps, M, 1)\n"
            "    return torch.randn(reps, M, 1, generator=torch.Generator().manual_seed(M), dtype=torch.float64)\n"
            "study = mf.convergence_in_m(sample, [8, 32, 128], reps=6, reference=Normal(0.0, 1.0), generator=0,"
            " progress=False)\n"
            "from meanfield.studies import Table\n"
            "table = Table([{'x': x, 'seed': s, 'y': x + s} for x in (1, 2) for s in (0, 1)], ('x', 'seed'), ('y',))"
        )
        try:
            yield run, shell
        finally:
            plt.close("all")
            _Shell.clear_instance()
            plt.switch_backend(backend)


def test_a_bare_plot_call_shows_its_figure_once(notebook):
    run, _ = notebook
    assert run("study.plot()") == ["Out"]  # the returned Figure, as the cell's value; the backend adds none
    assert run("table.plot('x', 'y')") == ["Out"]
    assert run("fig = study.plot()") == []  # assigned: shown where fig is written, like every result
    assert run("fig") == ["Out"]
    assert run("fig.savefig(__import__('io').BytesIO())") == []  # closed for pyplot, still whole


def test_a_returned_pyplot_figure_shows_twice_without_it(notebook):
    """Negative control: the same cell returning a pyplot figure as it stands is shown twice, so the check
    above sees a double display."""
    run, _ = notebook
    assert sorted(run("plt.subplots()[0]")) == ["Out", "display"]


def test_a_figure_of_the_callers_stays_the_callers(notebook):
    """``plot(ax=ax)`` draws on the caller's figure: not closed, so the backend shows it (once) at the cell's end."""
    run, _ = notebook
    assert run("fig, ax = plt.subplots()\n_ = study.plot(ax=ax)") == ["display"]
