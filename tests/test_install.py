"""reluexp as a user installs it: a built wheel in a fresh virtual environment, run from an empty
directory, with the user's own configs beside the shipped ones."""

import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

# One worker builds the wheel once for the module (pytest-xdist's loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("install")]

# What a wheel is built from: the package, its configs and the metadata.
SOURCES = ["pyproject.toml", "README.md", "reluexp", "conf", "experiments", "hydra_plugins"]
# setuptools' PEP 517 hook: the sdist's file name, written into the directory given.
BUILD_SDIST = (
    "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
)


def write_user_configs(root: Path) -> Path:
    """A researcher's own config directory: an activation and a study, outside reluexp."""
    (root / "activation").mkdir(parents=True)
    (root / "experiment").mkdir()
    (root / "activation" / "softplus.yaml").write_text(
        textwrap.dedent(
            """\
            name: softplus
            target: torch.nn.functional.softplus
            reference: torch.nn.functional.softplus
            """
        )
    )
    (root / "experiment" / "softplus_vs_relu.yaml").write_text(
        textwrap.dedent(
            """\
            # @package _global_
            hydra:
              mode: MULTIRUN
              sweeper:
                params:
                  activation: softplus,relu
            """
        )
    )
    return root


def install_wheel(root: Path) -> Path:
    """The python of a fresh venv holding reluexp from a wheel built from an sdist, and nothing
    else of it."""
    source = root / "source"
    source.mkdir()
    for name in SOURCES:
        if (REPO_ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__")
            shutil.copytree(REPO_ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy(REPO_ROOT / name, source / name)
    # The wheel is built from an sdist, as pip builds one from the registry's: whatever either
    # leaves out (the launcher plugin, a config) fails the tests that use it.
    sdist = subprocess.run(
        [sys.executable, "-c", BUILD_SDIST, str(root)],
        cwd=source,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    pip = [sys.executable, "-m", "pip"]
    archive = root / sdist.stdout.strip().splitlines()[-1]
    build = ["wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(root), str(archive)]
    subprocess.run(pip + build, check=True, capture_output=True, timeout=300)
    (wheel,) = root.glob("reluexp-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = ["--python", str(python), "install", "-q", "--no-deps", str(wheel)]
    subprocess.run(pip + install, check=True, capture_output=True, timeout=300)
    # The dependencies (torch, hydra, ...) from this environment, added after the install so
    # pip never sees the editable reluexp there: no network, no second torch.
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([python, "-c", purelib], check=True, capture_output=True, text=True)
    (Path(site.stdout.strip()) / "dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    return python


@pytest.fixture(scope="module")
def installed_python(tmp_path_factory) -> Path:
    return install_wheel(tmp_path_factory.mktemp("wheel"))


def run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    cwd.mkdir(exist_ok=True)
    result = subprocess.run(
        [str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"{' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    return result


def test_the_wheel_holds_the_configs_and_runs_from_an_empty_directory(installed_python, tmp_path):
    empty = tmp_path / "empty"
    location = run(installed_python, "-c", "import reluexp; print(reluexp.__file__)", cwd=empty)
    assert Path(location.stdout.strip()).is_relative_to(installed_python.parent.parent)
    single = run(installed_python, "-m", "reluexp", "steps=3", "device=cpu", cwd=empty)
    assert "reluexp: completed after 3 steps" in single.stderr
    assert len(list((empty / "outputs" / "runs").iterdir())) == 1
    # A named study from experiments/, one seed of each of its seven activations.
    study = ["experiment=custom_vs_builtin", "hydra.sweeper.params.seed=0", "steps=2"]
    run(installed_python, "-m", "reluexp", "-m", *study, "device=cpu", cwd=empty)
    (sweep_dir,) = (empty / "outputs" / "multirun").iterdir()
    assert len([p for p in sweep_dir.iterdir() if (p / "summary.json").is_file()]) == 7
    report = run(installed_python, "-m", "reluexp.report", str(sweep_dir), cwd=empty)
    assert "7 jobs: completed: 7" in report.stdout
    check = run(installed_python, "-m", "reluexp.check", "activation=relu", "steps=5", cwd=empty)
    assert "relu: gradients correct" in check.stdout
    console_help = run(installed_python.parent / "reluexp", "--help", cwd=empty)
    assert "custom_vs_builtin" in console_help.stdout


@pytest.mark.parametrize("install", ["editable", "wheel"])
def test_a_users_config_directory_adds_activations_and_studies(install, installed_python, tmp_path):
    python = installed_python if install == "wheel" else Path(sys.executable)
    searchpath = f"hydra.searchpath=[file://{write_user_configs(tmp_path / 'my_configs')}]"
    work = tmp_path / "work"
    single = run(python, "-m", "reluexp", searchpath, "activation=softplus", "steps=3", cwd=work)
    (run_dir,) = (work / "outputs" / "runs").iterdir()
    config = json.loads((run_dir / "summary.json").read_text())["config"]
    assert config["activation"]["target"] == "torch.nn.functional.softplus"
    assert "completed" in single.stderr
    study = ["-m", searchpath, "experiment=softplus_vs_relu", "steps=3", "device=cpu"]
    run(python, "-m", "reluexp", *study, cwd=work)
    (sweep_dir,) = (work / "outputs" / "multirun").iterdir()
    jobs = sorted(p.name for p in sweep_dir.iterdir() if (p / "summary.json").is_file())
    assert [job.split(",")[0] for job in jobs] == ["000_activation=softplus", "001_activation=relu"]


def test_the_wheel_is_pure_python(tmp_path):
    """The default install builds nothing: one py3-none-any wheel, holding no compiled file."""
    python = install_wheel(tmp_path)
    (wheel,) = tmp_path.glob("reluexp-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        compiled = [n for n in archive.namelist() if n.endswith((".so", ".c", ".pyd"))]
    assert compiled == []
    assert run(python, "-m", "reluexp", "steps=3", "device=cpu", cwd=tmp_path / "w").returncode == 0
