"""The package's layers, read from the modules' own imports: nothing imports upward, and there are
no import cycles, not even through imports inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# lowest first; a module may import its own layer and the ones before it (docs/architecture.md's picture)
LAYERS = [
    ("rnnlab.common", "rnnlab.compile", "rnnlab.files", "rnnlab.init", "rnnlab.machine", "rnnlab.metrics",
     "rnnlab.page", "rnnlab.version"),
    ("rnnlab.cells",),
    ("rnnlab.engines",),
    ("rnnlab.layers", "rnnlab.blocks", "rnnlab.losses", "rnnlab.optim", "rnnlab.models", "rnnlab.budget",
     "rnnlab.gradcheck",
     "rnnlab.checks",
     "rnnlab.interop"),
    ("rnnlab.data",),
    ("rnnlab.train", "rnnlab.replicas"),
    ("rnnlab.analysis",),
    ("rnnlab.experiments",),
    ("rnnlab.pages",),
    ("rnnlab.cli",),
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "rnnlab").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _layer(module: str) -> int:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    raise AssertionError(f"{module} belongs to no layer; add it to LAYERS (and docs/architecture.md)")


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every rnnlab module this file imports, at the top or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from package import submodule`` imports the submodule (its package is initialising)
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                     for a in node.names]
        for name in names:
            if name.startswith("rnnlab") and name in modules:
                out.add(name)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items() if name != "rnnlab"}


def test_no_module_imports_a_higher_layer():
    upward = [f"{m} (layer {_layer(m)}) imports {d} (layer {_layer(d)})"
              for m, deps in _graph().items() for d in deps if d != "rnnlab" and _layer(d) > _layer(m)]
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    graph = {m: {d for d in deps if d != "rnnlab"} for m, deps in _graph().items()}
    # a package's __init__ re-exports its modules; importing the package is importing them
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(path[path.index(dep):] + [dep]) if dep in path else f"{node} -> {dep}")
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "\n".join(cycles)


def test_the_manual_describes_these_layers():
    layout = (SRC.parent / "docs" / "architecture.md").read_text()
    names = [prefixes[0].split(".")[-1] for prefixes in LAYERS]
    positions = [layout.index(f"`{name}`") for name in names]
    assert positions == sorted(positions), "docs/architecture.md lists the layers in another order"


def test_ci_runs_the_readmes_test_command_with_both_tiers():
    """CI must call the README's test command, and that command runs the fast and the slow tier."""
    readme = (SRC.parent / "README.md").read_text()
    commands = [line for line in readme.splitlines() if line.startswith("python3 -m venv") and "pytest" in line]
    assert len(commands) == 1, commands
    ci = (SRC.parent / ".ci" / "run").read_text()
    assert commands[0] in ci
    # under `set -e` a failure inside an && list does not stop a script: the line must exit on failure itself
    after = ci[ci.index(commands[0]) + len(commands[0]):].split("\n\n")[0]
    assert "|| {" in after and "exit 1" in after, "CI would go on (and pass) after the README's tests failed"
    assert "python -m pytest &&" in commands[0] and commands[0].endswith("python -m pytest -m slow")


def test_the_version_is_one_fact():
    """pyproject reads rnnlab.version when the package is built; the installed metadata agrees with it."""
    import importlib.metadata

    import rnnlab
    from rnnlab.version import __version__

    pyproject = (SRC.parent / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = { attr = "rnnlab.version.__version__" }' in pyproject
    assert rnnlab.__version__ == __version__ == importlib.metadata.version("rnnlab")


def test_every_compiled_function_goes_through_the_one_compile_policy():
    """Numba's decorators are applied in ``rnnlab.compile`` only: a module that compiles uses its ``kernel``,
    ``threaded_kernel``, ``inline`` or the named exception ``reduction_kernel``, so no options are restated."""
    direct = []
    for name, path in _modules().items():
        if name == "rnnlab.compile":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "numba" and any(
                    a.name in ("njit", "jit", "vectorize", "guvectorize") for a in node.names):
                direct.append(name)
            elif isinstance(node, ast.Attribute) and node.attr in ("njit", "jit") and \
                    isinstance(node.value, ast.Name) and node.value.id == "numba":
                direct.append(name)
    assert direct == []


def test_no_function_in_the_package_is_over_60_lines():
    """A function a reader can hold in view: each does one thing, its helpers named after what they do."""
    long = []
    for name, path in sorted(_modules().items()):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long, "\n".join(long)
