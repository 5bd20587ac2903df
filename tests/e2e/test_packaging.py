"""What ships with the package (meanfield/shipped.py, setup.py): the theory checks and the experiment
configurations are found by name, from any working directory, in a checkout and in a built package alike.

The built-package tests run ``setup.py``'s ``build_py`` into a temporary folder (what a wheel holds) and import
``meanfield`` from there in a subprocess started outside the checkout; ``.ci/run`` builds the real wheel and
sdist and runs ``meanfield validate`` and a smoke run from a fresh virtual environment.
"""

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from meanfield import shipped
from meanfield.cli import main
from meanfield.config import load_toml, load_toml_text, resolve
from meanfield.studies.validation import NoTheoryFolder, discover

ROOT = Path(__file__).resolve().parents[2]
NAMES = {  # the documented names (docs/running.md) and the files they are
    "char_lm": "char_lm/config.toml",
    "feature_particles/images": "feature_particles/images.toml",
    "feature_particles/teacher_student": "feature_particles/teacher_student.toml",
    "mean_field": "mean_field/config.toml",
    "particle_attention": "particle_attention/config.toml",
    "particle_attention/scale": "particle_attention/scale.toml",
    "particle_attention/toy": "particle_attention/toy.toml",
    "teacher_student": "teacher_student/config.toml",
}
CHECKS = sorted(p.stem for p in (ROOT / "theory").glob("*.py") if not p.stem.startswith("_"))
needs_setup_py = pytest.mark.skipif(
    not (ROOT / "setup.py").is_file(), reason="not a whole source tree (mutmut's copy has no setup.py)"
)


def test_in_the_checkout_the_shipped_folders_are_the_top_level_ones():
    assert shipped.source_root() == ROOT
    assert shipped.theory_dir() == ROOT / "theory" and shipped.experiments_dir() == ROOT / "experiments"
    # a folder inside the package would shadow the checkout's (it is what a wheel has): none may be there
    assert not any((ROOT / "meanfield" / name).exists() for name in shipped.SHIPPED)


def test_every_shipped_name_is_its_file_under_experiments():
    assert shipped.configs() == {name: ROOT / "experiments" / rel for name, rel in NAMES.items()}
    for name, rel in NAMES.items():
        assert shipped.config_path(name) == ROOT / "experiments" / rel
        assert shipped.find_config(name) == (ROOT / "experiments" / rel, name)
        assert shipped.config_name(ROOT / "experiments" / rel) == name


def test_a_file_wins_over_a_name_and_an_unknown_name_lists_the_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "char_lm").write_text('task = "teacher_student"\n')  # a user's own file named like a config
    assert shipped.find_config("char_lm") == (Path("char_lm"), None)
    with pytest.raises(
        shipped.UnknownConfig, match="no configuration file or shipped configuration named 'nope'"
    ):
        shipped.find_config("nope")
    with pytest.raises(shipped.UnknownConfig) as error:
        shipped.config_path("char_lm/config.toml")  # a name, not a path under experiments/
    assert all(name in str(error.value) for name in NAMES)


@needs_setup_py
def test_setup_py_ships_the_same_folders_and_files():
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_py_under_test")  # setup() not called
    assert setup["SHIPPED"] == shipped.SHIPPED
    inner = sorted(inner for _, inner in setup["shipped_files"]())
    expected = sorted([f"theory/{p.name}" for p in (ROOT / "theory").glob("*.py")] +
                      [f"experiments/{rel}" for rel in NAMES.values()])  # fmt: skip
    assert inner == expected


def test_run_list_prints_every_name_with_its_presets_and_description(capsys):
    assert main(["run", "--list"]) == 0
    out = capsys.readouterr().out
    lines = {
        line.split()[0]: line for line in out.splitlines()[1:] if line.strip() and line.split()[0] in NAMES
    }
    assert set(lines) == set(NAMES)
    for name, rel in NAMES.items():
        raw = load_toml(ROOT / "experiments" / rel)
        assert raw["description"] in lines[name] and ", ".join(raw["presets"]) in lines[name]
    assert f"{len(NAMES)} configurations in {ROOT / 'experiments'}" in out


def test_print_config_copies_the_file_and_resolves_with_a_preset(capsys):
    assert main(["run", "particle_attention/toy", "--print-config"]) == 0
    assert capsys.readouterr().out == (ROOT / "experiments/particle_attention/toy.toml").read_text()
    assert main(["run", "char_lm", "--print-config", "--preset", "smoke", "--set", "train.steps=3"]) == 0
    printed = load_toml_text(capsys.readouterr().out)
    assert printed == resolve(load_toml(ROOT / "experiments/char_lm/config.toml"), "smoke", ["train.steps=3"])
    # negative control: an unknown preset is one line naming the presets there are
    assert main(["run", "char_lm", "--print-config", "--preset", "medium"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("meanfield run: error: unknown preset 'medium'") and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "nope"], "no configuration file or shipped configuration named 'nope'; shipped: char_lm, "),
        (
            ["run", "missing.toml"],
            "configuration file missing.toml does not exist; the shipped configurations",
        ),
        (["run"], "a configuration is needed: a shipped name (meanfield run --list) or a TOML file"),
        (
            ["sweep", "nope", "--grid", "seed=0,1"],
            "no configuration file or shipped configuration named 'nope'",
        ),
    ],
)
def test_a_bad_configuration_argument_is_one_line(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"meanfield {argv[0]}: error: {message}") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()


def test_a_run_by_name_trains_into_runs_name_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["run", "particle_attention/toy", "--preset", "smoke", "--set", "train.steps=2", "--quiet"]
    assert main(argv) == 0
    assert (tmp_path / "runs" / "particle_attention-toy-smoke" / "summary.json").is_file()


def test_validate_finds_the_packages_checks_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./theory here
    assert sorted(discover()) == CHECKS
    decoy = tmp_path / "theory"  # negative control: a ./theory folder is not what the package validates
    decoy.mkdir()
    (decoy / "decoy.py").write_text("raise RuntimeError('must not be imported')\n")
    assert sorted(discover()) == CHECKS


def test_without_the_folders_validate_and_list_say_so_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shipped, "PACKAGE", tmp_path / "site-packages" / "meanfield")  # a wheel without them
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NoTheoryFolder, match="no theory/ folder"):
        discover()
    assert main(["validate", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("meanfield validate: error: no theory/ folder") and len(err.splitlines()) == 1
    assert shipped.configs() == {}
    assert main(["run", "char_lm"]) == 2
    assert "shipped: none" in capsys.readouterr().err


@needs_setup_py
def test_a_built_package_finds_its_own_copies_outside_any_checkout(tmp_path):
    """``build_py`` (what the wheel holds) copies theory/ and the configurations byte for byte, and the package
    imported from the build, in a directory outside the checkout, uses those copies."""
    lib = tmp_path / "lib"
    build = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    assert (lib / "meanfield" / "py.typed").is_file()
    for p in (ROOT / "theory").glob("*.py"):
        assert (lib / "meanfield" / "theory" / p.name).read_bytes() == p.read_bytes()
    for rel in NAMES.values():
        assert (lib / "meanfield" / "experiments" / rel).read_bytes() == (
            ROOT / "experiments" / rel
        ).read_bytes()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    code = (
        "import meanfield, meanfield.shipped as s\n"
        "from meanfield.studies.validation import discover\n"
        "print(s.source_root()); print(s.theory_dir()); print(sorted(discover())); print(list(s.configs()))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(lib), "OMP_WAIT_POLICY": "PASSIVE"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=outside, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    root, theory, checks, names = out.stdout.splitlines()
    assert root == "None" and theory == str(lib / "meanfield" / "theory")
    assert checks == str(CHECKS) and names == str(list(NAMES))


def test_a_listing_piped_into_a_reader_that_leaves_is_no_traceback():
    """``meanfield run --list | head -1``: the reader closes the pipe; the command ends quietly with status 0."""
    import subprocess
    import sys

    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from meanfield.cli import main; sys.exit(main(['run', '--list'] * 1))",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # before anything is read: every write meets a closed pipe
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0 and "Traceback" not in err and "BrokenPipeError" not in err, err
