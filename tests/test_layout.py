"""The package's shape: sub-packages that name the architecture, no import cycle, no module that
imports an entry point, no module too long to read."""

import ast
from pathlib import Path

import pytest
import tomllib

from tests.helpers import REPO_ROOT

PACKAGE = REPO_ROOT / "reluexp"
# `python -m reluexp`, `python -m reluexp.check`, `python -m reluexp.report`, and the commands
# behind them: only their own shims import these.
ENTRY_POINTS = {
    "reluexp.__main__": set(),
    "reluexp.check": set(),
    "reluexp.report": set(),
    "reluexp.lab.command": {"reluexp.check"},
    "reluexp.sweeps.report.command": {"reluexp.report"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The reluexp and hydra_plugins modules a module imports, wherever: at its top, and inside
    a function, imported later on purpose (an import cycle through one still runs, backwards,
    when that function does); not under TYPE_CHECKING."""
    found = set()
    typing_only = {
        id(child)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in ast.walk(node)
    }
    for node in ast.walk(ast.parse(path.read_text())):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            # `from reluexp.run import runner` imports the module reluexp.run.runner.
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


# Every module the product ships: the package and the launcher plugin Hydra finds by namespace.
MODULES = {
    module_name(p): p
    for root in (PACKAGE, REPO_ROOT / "hydra_plugins")
    for p in sorted(root.rglob("*.py"))
}
GRAPH = {name: (imports_of(path) & set(MODULES)) - {name} for name, path in MODULES.items()}


def test_the_package_is_made_of_sub_packages_that_name_its_parts():
    packages = {p.parent.name for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE}
    assert {"functions", "run", "record", "sweeps", "lab"} <= packages
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert flat == [
        "__init__.py",
        "__main__.py",
        "_compat.py",
        "check.py",
        "cli.py",
        "config.py",
        "hydra_glue.py",
        "options.py",
        "preflight.py",
        "report.py",
        "validation.py",
    ]


def test_the_graph_sees_imports_inside_functions_and_the_plugin():
    """The cycle that ran hydra_glue -> the launcher plugin (an import inside a function) ->
    sweeps -> hydra_glue was invisible to a graph of module-level imports of reluexp/ alone."""
    assert "reluexp.run.runner" in GRAPH["reluexp.cli"]  # imported inside run_job
    assert "reluexp.sweeps.launcher" in GRAPH["hydra_plugins.reluexp_launcher.launchers"]


def test_no_import_cycle():
    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for imported in GRAPH[node]:
                if imported == start:
                    return [*path, start]
                if imported not in path:
                    stack.append((imported, [*path, imported]))
        return None

    cycles = [cycle for name in GRAPH if (cycle := cycle_from(name))]
    assert not cycles, " -> ".join(cycles[0])


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_no_module_imports_an_entry_point(entry):
    importers = {name for name, imported in GRAPH.items() if entry in imported}
    assert importers <= ENTRY_POINTS[entry]


# Each layer decides only its own things, so imports run one way: a run decides (the loop, the
# update, the outcome) and record/ only receives values and writes them; the Functions know no
# run; the lab and the sweeps use runs (and Hydra's glue, whose configs they read), runs use
# neither and know nothing of Hydra; the entry points are above them all.
HYDRA_FACING = {"reluexp.functions", "reluexp.record", "reluexp.run", "reluexp.hydra_glue"}
LAYERS_BELOW = {
    "reluexp.functions": set(),
    "reluexp.record": set(),
    "reluexp.run": {"reluexp.functions", "reluexp.record"},
    "reluexp.lab": HYDRA_FACING,
    "reluexp.sweeps": HYDRA_FACING,
}
# What every layer may import: the schema and its checks, and dependencies' non-public names.
SHARED = {
    "reluexp",
    "reluexp.config",
    "reluexp.options",
    "reluexp.validation",
    "reluexp._compat",
}


@pytest.mark.parametrize("layer", LAYERS_BELOW)
def test_a_layer_imports_only_the_layers_below_it(layer):
    allowed = LAYERS_BELOW[layer] | {layer}
    crossing = {
        (name, imported)
        for name, imports in GRAPH.items()
        if name == layer or name.startswith(f"{layer}.")
        for imported in imports
        if imported not in SHARED
        and not any(imported == a or imported.startswith(f"{a}.") for a in allowed)
    }
    assert not crossing, sorted(crossing)


def test_the_record_layer_never_imports_the_run_layer_even_for_its_types():
    """record/ receives values: not even a TYPE_CHECKING import of run/ (the one arrow that
    ran back up, record -> run, is gone)."""
    sources = [p for name, p in MODULES.items() if name.startswith("reluexp.record.")]
    assert not [p.name for p in sources if "reluexp.run" in p.read_text()]


def test_no_module_grows_past_what_one_reads_at_a_sitting():
    long = {
        name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > 500
    }
    assert not long


def test_every_sub_package_ships_in_the_wheel():
    """pyproject.toml lists the packages (conf/ and experiments/ are mapped into reluexp): a
    new sub-package missing there is missing from every installed wheel."""
    listed = set(
        tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {module_name(p.parent / "__init__.py") for p in PACKAGE.rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
