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
    """The modules a module imports, wherever: at its top, and inside a function, imported
    later on purpose (an import cycle through one still runs, backwards, when that function
    does); relative imports resolved; not under TYPE_CHECKING."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports_in(path.read_text(), package)


def imports_in(source: str, package: str) -> set[str]:
    """imports_of a module's source, relative imports resolved from its package."""
    found = set()
    tree = ast.parse(source)
    typing_only = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
            if node.level == 0:
                module = node.module or ""
            found.add(module)
            # `from reluexp.run import runner` imports the module reluexp.run.runner.
            found |= {f"{module}.{alias.name}" for alias in node.names}
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
    assert {"functions", "run", "record", "sweeps", "lab", "shell"} <= packages
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
        "report.py",
        "validation.py",
    ]


def test_the_graph_sees_imports_inside_functions_and_the_plugin():
    """The cycle that ran hydra_glue -> the launcher plugin (an import inside a function) ->
    sweeps -> hydra_glue was invisible to a graph of module-level imports of reluexp/ alone."""
    assert "reluexp.run.runner" in GRAPH["reluexp.shell.lifecycle"]  # imported inside run_job
    assert "reluexp.sweeps.launcher" in GRAPH["hydra_plugins.reluexp_launcher.launchers"]


def test_the_graph_resolves_relative_imports():
    """A relative import is an arrow like any other (`from ..sweeps import names` in the lab
    would cross a layer)."""
    source = "from ..sweeps import names\nfrom .subject import Subject\nfrom . import cases\n"
    found = imports_in(source, "reluexp.lab")
    assert {"reluexp.sweeps.names", "reluexp.lab.subject", "reluexp.lab.cases"} <= found


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
# neither and know nothing of Hydra; the process shell runs them all (a sweep's end checks its
# Functions); the launcher plugin launches a sweep's jobs in the shell's session; the entry
# points (ENTRY_POINTS, cli) are above them all.
HYDRA_FACING = {"reluexp.functions", "reluexp.record", "reluexp.run", "reluexp.hydra_glue"}
LAYERS_BELOW = {
    "reluexp.functions": set(),
    "reluexp.record": set(),
    "reluexp.run": {"reluexp.functions", "reluexp.record"},
    "reluexp.lab": HYDRA_FACING,
    "reluexp.sweeps": HYDRA_FACING,
    "reluexp.hydra_glue": set(),
    "reluexp.shell": HYDRA_FACING | {"reluexp.lab", "reluexp.sweeps"},
    "hydra_plugins": {"reluexp.shell", "reluexp.sweeps"},
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
        if (name == layer or name.startswith(f"{layer}.")) and name not in ENTRY_POINTS
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


def test_every_module_the_product_ships_is_in_a_layer_or_an_entry_point():
    """A module in no layer is seen by no layer's test (the launcher plugin was in none, so
    lab -> hydra_glue -> plugin -> sweeps went unseen)."""
    placed = {*LAYERS_BELOW, *ENTRY_POINTS, *SHARED, "reluexp.cli"}
    unplaced = [
        name
        for name in MODULES
        if not any(name == layer or name.startswith(f"{layer}.") for layer in placed)
    ]
    assert not unplaced


def test_the_lab_command_composes_without_the_sweeps():
    """reluexp.check composes a config (hydra_glue) without importing the sweeps layer."""

    def reached(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for imported in GRAPH[todo.pop()] - seen:
                seen.add(imported)
                todo.append(imported)
        return seen

    assert "reluexp.hydra_glue" in reached("reluexp.lab.command")
    assert not {m for m in reached("reluexp.hydra_glue") if m.startswith("reluexp.sweeps")}
    assert not {m for m in reached("reluexp.hydra_glue") if m.startswith("hydra_plugins")}


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
