"""Tests of :mod:`meanfield.studies.figures`."""

from __future__ import annotations

import sys
import types
from pathlib import Path

from meanfield.studies import figures

SCRIPT = (
    "import sys\nfrom pathlib import Path\nif __name__ == '__main__':\n"
    "    Path(sys.argv[1]).write_text('{stem} ' + sys.argv[0])\n"
)


def _fake_checks(monkeypatch, tmp_path, scripts=("overview.py", "quickstart.py")):
    """Three fake theory checks (alpha draws, beta fails, gamma makes no plot) and a source root with
    ``experiments/<scripts>`` that write ``"<stem> <argv[0]>"`` to their argument."""
    monkeypatch.chdir(tmp_path)  # a wrong relative path lands here, not in the checkout
    theory, root = tmp_path / "theory", tmp_path / "root"
    (root / "experiments").mkdir(parents=True)
    for script in scripts:
        (root / "experiments" / script).write_text(SCRIPT.replace("{stem}", Path(script).stem))
    calls = []

    def validate(
        names=None, *, preset="fast", out="validate-out", theory_dir=None, progress=True, echo=print
    ):
        calls.append(
            dict(names=list(names), preset=preset, theory_dir=theory_dir, progress=progress, echo=echo)
        )
        folder = Path(out)
        assert folder.is_dir()
        results = []
        for name in names:
            if name == "alpha":
                (folder / "alpha.png").write_bytes(b"alpha figure")
            results.append(types.SimpleNamespace(name=name, error="boom" if name == "beta" else None))
        return types.SimpleNamespace(results=results)

    monkeypatch.setattr(figures, "default_theory_dir", lambda: theory)
    monkeypatch.setattr(
        figures, "discover", lambda folder: {n: folder / f"{n}.py" for n in ("alpha", "beta", "gamma")}
    )
    monkeypatch.setattr(figures, "validate", validate)
    monkeypatch.setattr(figures, "source_root", lambda: root)
    return calls, theory, root


def test_generate_copies_the_checks_figures_and_runs_the_scripts(monkeypatch, tmp_path, capsys):
    """Into a new nested folder: the checks' PNGs copied byte for byte, one line for each check without a
    figure (why), the scripts run as ``__main__`` with ``argv = [script, out/<stem>.png]``, ``sys.argv``
    restored; the returned list is every PNG in the folder, sorted."""
    calls, theory, root = _fake_checks(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "deep" / "figs"
    argv = list(sys.argv)
    got = figures.generate(out, preset="full", progress=False)
    assert calls == [
        dict(names=["alpha", "beta", "gamma"], preset="full", theory_dir=theory, progress=False, echo=None)
    ]
    assert (out / "alpha.png").read_bytes() == b"alpha figure"
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "meanfield figures: beta made no figure (error)",
        "meanfield figures: gamma made no figure (no plot)",
    ]
    for stem in ("overview", "quickstart"):
        assert (out / f"{stem}.png").read_text() == f"{stem} {root / 'experiments' / f'{stem}.py'}"
    assert sys.argv == argv and not (tmp_path / "None").exists()
    assert got == [out / "alpha.png", out / "overview.png", out / "quickstart.png"]


def test_generate_keep_existing_skips_what_is_there(monkeypatch, tmp_path):
    """``keep_existing``: the checks and scripts whose PNG exists are skipped (their files untouched), the
    others run, into an existing folder; with ``keep_existing=False`` everything reruns."""
    calls, _, _ = _fake_checks(monkeypatch, tmp_path)
    out = tmp_path / "figs"
    out.mkdir()
    (out / "alpha.png").write_bytes(b"old alpha")
    (out / "overview.png").write_text("old overview")
    got = figures.generate(out, keep_existing=True, progress=False)
    assert calls[-1]["names"] == ["beta", "gamma"] and calls[-1]["preset"] == "fast"
    assert (out / "alpha.png").read_bytes() == b"old alpha" and (
        out / "overview.png"
    ).read_text() == "old overview"
    assert (out / "quickstart.png").read_text().startswith("quickstart ")
    assert got == sorted(out.glob("*.png")) and len(got) == 3
    figures.generate(out, progress=False)
    assert calls[-1]["names"] == ["alpha", "beta", "gamma"]
    assert (out / "alpha.png").read_bytes() == b"alpha figure" and (
        out / "overview.png"
    ).read_text() != "old overview"


def test_generate_default_folder_and_a_missing_script(monkeypatch, tmp_path):
    """The default folder is ``docs/figures`` under the working directory (created with its parents); a
    script that is not there is skipped and the next one still runs; no source root: no scripts."""
    _fake_checks(monkeypatch, tmp_path, scripts=("quickstart.py",))
    monkeypatch.chdir(tmp_path)
    got = figures.generate(progress=False)
    out = Path("docs") / "figures"
    assert sorted(p.name for p in (tmp_path / out).iterdir()) == ["alpha.png", "quickstart.png"]
    assert [p.name for p in got] == ["alpha.png", "quickstart.png"]
    monkeypatch.setattr(figures, "source_root", lambda: None)
    assert [p.name for p in figures.generate(tmp_path / "wheel", progress=False)] == ["alpha.png"]
