"""The house rules, checked on every test run: ruff passes with pyproject.toml's configuration, and the import graph
keeps the layers of /work/shared/design.md (ui → cli → jobs → engine → hub → system, dependencies pointing down
only), Qt inside guiapp/ui, torch outside guiapp/hub, and no import cycles between modules."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "guiapp"
# Higher imports lower, never the reverse. errors is shared by every layer, so it sits below all; progress serves
# hub, engine and jobs and may use system's helpers (its log lines are scrubbed of secrets by system.scrub).
LAYERS = {"__main__": 6, "ui": 6, "cli": 5, "docs_recipes": 5, "jobs": 4, "engine": 3, "checkpoints": 3, "hub": 2,
          "progress": 1.5, "system": 1, "errors": 0, "__init__": 0}
QT = ("PySide6", "shiboken6", "qasync", "pyqtgraph")  # pyqtgraph draws with Qt: the window's charts only
# Imports that go up on purpose, each with its reason; anything else going up fails the test.
UPWARD_BY_DESIGN = {
    # `mergesmith` without a command opens the window: the entry point starts the top layer, lazily.
    ("guiapp.cli", "guiapp.ui.app"),
    ("guiapp.cli", "guiapp.ui.self_test"),
}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name inside guiapp
    imported: str  # dotted name as written (resolved when relative)
    line: int
    top_level: bool  # runs when the importer is imported (not inside a function or `if TYPE_CHECKING`)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> list[Import]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        found += _walk(tree, module, package, top_level=True)
    return found


def _walk(node: ast.AST, module: str, package: str, top_level: bool) -> list[Import]:
    found = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import):
            found += [Import(module, alias.name, child.lineno, top_level) for alias in child.names]
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from guiapp.engine import merge` imports the module guiapp.engine.merge when there is one.
            names = [f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base for alias in child.names]
            found += [Import(module, name, child.lineno, top_level) for name in dict.fromkeys(names)]
        else:
            nested = top_level and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                and not _is_type_checking(child)
            found += _walk(child, module, package, nested)
    return found


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _layer(module: str) -> float:
    return LAYERS[module.split(".")[1] if "." in module else "__init__"]


def _where(item: Import) -> str:
    return f"{item.importer} (line {item.line}) imports {item.imported}"


IMPORTS = _imports()


def test_qt_is_imported_only_under_guiapp_ui():
    outside = [_where(i) for i in IMPORTS if i.imported.split(".")[0] in QT and not i.importer.startswith("guiapp.ui")]
    assert outside == []


def test_the_hub_package_never_imports_torch():
    torch = [_where(i) for i in IMPORTS if i.importer.startswith("guiapp.hub")
             and (i.imported.split(".")[0] == "torch" or i.imported == "safetensors.torch")]
    assert torch == []


def test_layers_import_only_downwards():
    upward = [_where(i) for i in IMPORTS
              if i.imported.startswith("guiapp.") and i.imported != "guiapp" and _is_module(i.imported)
              and _layer(i.imported) > _layer(i.importer)
              and (i.importer, i.imported) not in UPWARD_BY_DESIGN]
    assert upward == []


def test_no_import_cycles_between_modules():
    graph: dict[str, set[str]] = {}
    for item in IMPORTS:
        if item.top_level and item.imported.startswith("guiapp") and _is_module(item.imported):
            graph.setdefault(item.importer, set()).add(item.imported)
    cycles = _cycles(graph)
    assert cycles == [], "\n".join(" → ".join(cycle) for cycle in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules (Tarjan's algorithm), each starting at its first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_contracts_see_the_imports_they_judge():
    """The graph reader itself: it finds a lazy Qt import, a relative import and a top-level one."""
    by_importer = {(i.importer, i.imported): i for i in IMPORTS}
    assert not by_importer[("guiapp.cli", "guiapp.ui.app")].top_level
    assert by_importer[("guiapp.ui.background", "PySide6.QtCore")].top_level
    assert any(i.importer.startswith("guiapp.engine.methods.") and i.imported == "guiapp.engine.methods.base"
               for i in IMPORTS)
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_ruff_passes():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: pip install -e '.[test]' installs it")
    done = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_every_import_inside_a_function_says_why():
    """Outside the layers whose lazy imports pyproject.toml explains once (cli, ui, jobs, hub), an import inside a
    function carries its reason on the line: `# noqa: PLC0415 - why`."""
    silent = [f"{path.relative_to(ROOT)}:{number}"
              for path in sorted(PACKAGE.rglob("*.py"))
              for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
              if line.rstrip().endswith("# noqa: PLC0415")]
    assert silent == [], f"imports inside functions without a reason: {silent}"
