"""The house rules, checked on every test run: ruff passes with pyproject.toml's configuration, and the import graph
keeps the layers (ui → cli → jobs → the capability packages → hub → system, dependencies pointing down
only), Qt inside guiapp/ui, torch outside guiapp/hub, no import cycles between modules, and no window class over
300 lines. The shared facts (guiapp/facts) sit below every layer, import only the standard library, and are the
only place a dtype table is written down."""

from __future__ import annotations

import ast
import re
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
LAYERS = {"__main__": 6, "ui": 6, "cli": 5, "jobs": 4,
          # The capabilities, each a package: a job's engine room. Higher ones use lower ones' parts.
          "moe": 3.6, "gguf": 3.6, "lab": 3.55, "inference": 3.5, "lora": 3.4, "merging": 3.3, "checkpoints": 3.2, "compute": 3.1,
          "hub": 2, "progress": 1.5, "system": 1, "errors": 0, "__init__": 0, "facts": -1}
QT = ("PySide6", "shiboken6", "qasync", "pyqtgraph")  # pyqtgraph draws with Qt: the window's charts only


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
            # `from guiapp.merging import merge` imports the module guiapp.merging.merge when there is one.
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


# "The window renders, the layers below decide": widgets reach the engine and the Hub only through guiapp.jobs, and
# read or write no YAML themselves. Facts (guiapp.facts) and the system layer's helpers stay allowed.
BELOW_THE_JOBS = ("guiapp.hub", "guiapp.merging", "guiapp.lora", "guiapp.inference", "guiapp.checkpoints",
                  "guiapp.compute", "guiapp.moe", "guiapp.lab", "guiapp.gguf")


def test_the_window_reaches_the_engine_and_the_hub_only_through_the_jobs():
    """Lazy imports included: an import inside a function still puts the engine's decision in the widget."""
    reaching = [_where(i) for i in IMPORTS if i.importer.startswith("guiapp.ui")
                and (i.imported.split(".")[0] == "yaml"
                     or any(i.imported == layer or i.imported.startswith(layer + ".") for layer in BELOW_THE_JOBS))]
    assert reaching == []


# A window class a person can hold in mind: past this many lines a page does several things, and its parts go into
# collaborators named for what they do (a box of widgets, a helper, a decision below the window in guiapp/jobs).
LONGEST_WINDOW_CLASS = 300


def window_classes_over(limit: int) -> list[str]:
    """Every class under guiapp/ui longer than `limit` lines (from its `class` line to its last), with its length."""
    found = []
    for path in sorted((PACKAGE / "ui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef) and (lines := node.end_lineno - node.lineno + 1) > limit:
                found.append(f"{path.relative_to(ROOT)}: {node.name} has {lines} lines")
    return found


def test_no_window_class_is_longer_than_a_person_can_hold_in_mind():
    too_long = window_classes_over(LONGEST_WINDOW_CLASS)
    assert too_long == [], "\n".join(too_long)
    assert window_classes_over(50), "the rule sees no class at all"


def test_the_hub_package_never_imports_torch():
    torch = [_where(i) for i in IMPORTS if i.importer.startswith("guiapp.hub")
             and (i.imported.split(".")[0] == "torch" or i.imported == "safetensors.torch")]
    assert torch == []


def test_layers_import_only_downwards():
    upward = [_where(i) for i in IMPORTS
              if i.imported.startswith("guiapp.") and i.imported != "guiapp" and _is_module(i.imported)
              and _layer(i.imported) > _layer(i.importer)]
    assert upward == []


def test_no_import_cycles_between_modules():
    """Counting imports made inside functions too: a cycle hidden behind a lazy import is still a cycle."""
    graph: dict[str, set[str]] = {}
    for item in IMPORTS:
        if item.imported.startswith("guiapp") and _is_module(item.imported):
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


FACTS = PACKAGE / "facts"


def test_facts_import_only_the_standard_library():
    """Every import in guiapp/facts, inside functions too, names a standard library module or another fact module:
    no torch, nothing of the product above them."""
    facts = [i for i in IMPORTS if i.importer == "guiapp.facts" or i.importer.startswith("guiapp.facts.")]
    assert {i.importer for i in facts} >= {"guiapp.facts.dtypes", "guiapp.facts.choices"}, "the facts package is missing"
    foreign = [_where(i) for i in facts
               if i.imported.split(".")[0] not in sys.stdlib_module_names
               and not (i.imported == "guiapp.facts" or i.imported.startswith("guiapp.facts."))]
    assert foreign == []


def test_importing_the_facts_loads_no_torch_and_nothing_else_of_the_product():
    modules = sorted(_module_name(path) for path in FACTS.rglob("*.py"))
    assert modules, "the facts package is missing"
    probe = (f"import sys; import {', '.join(modules)}; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'safetensors') "
             "or m.startswith('guiapp.') and not m.startswith('guiapp.facts')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def _dtype_vocabulary() -> dict[str, str]:
    """Every way the product spells a floating dtype ("bf16", "torch.float16" is read as "float16", "double"), to
    the dtype it names; read from the table itself, so a new row is covered too."""
    from guiapp.facts.dtypes import TABLE  # only this rule needs the table; without one, the rule fails

    return {spelling.lower(): dtype.name for dtype in TABLE if "float" in dtype.name
            for spelling in (dtype.name, *dtype.aliases)}


def _dtypes_named(node: ast.AST, vocabulary: dict[str, str]) -> set[str]:
    """The dtypes one element of a literal names: a string spelling one ("bf16", "torch.float16"), the attribute
    `torch.float16`, or, for a call such as `Row(2, "float16", …)`, any of its direct arguments that does."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        name = vocabulary.get(node.value.lower().removeprefix("torch."))
        return {name} if name else set()
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        name = vocabulary.get(node.attr)
        return {name} if name else set()
    if isinstance(node, ast.Call):  # a row's own values, not those of calls inside it (an entry's Remedy)
        return set().union(*(_dtypes_named(argument, vocabulary)
                             for argument in (*node.args, *(k.value for k in node.keywords))
                             if not isinstance(argument, ast.Call)))
    return set()


def dtype_tables(tree: ast.AST, vocabulary: dict[str, str]) -> list[tuple[int, list[str]]]:
    """The rule: a dtype table is a tuple, list, set or dict literal whose elements (a dict's keys and values)
    name two or more different floating dtypes between them (see `_dtypes_named`); (line, dtypes) of each.
    A comparison with one dtype, or text that mentions several, is no table."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elements = list(node.elts)
        elif isinstance(node, ast.Dict):
            elements = [key for key in node.keys if key is not None] + list(node.values)
        else:
            continue
        named = set().union(*(_dtypes_named(element, vocabulary) for element in elements))
        if len(named) >= 2:
            found.append((node.lineno, sorted(named)))
    return found


def test_the_dtype_rule_sees_tables_and_only_tables():
    vocabulary = _dtype_vocabulary()
    tables = dtype_tables(ast.parse(
        'A = ("bfloat16", "float16")\nB = {"bf16": torch.bfloat16, "half": torch.float16}\n'
        'C = {torch.float32, torch.float64}\nD = {"F32": Row(4, "float32"), "F64": Row(8, "float64")}\n'
        'E = ("float32", "recipe")\nF = x in (torch.float32,)\nG = ["use float16 or float32"]\n'), vocabulary)
    assert [line for line, _ in tables] == [1, 2, 3, 4]


def test_no_dtype_table_outside_the_facts():
    vocabulary = _dtype_vocabulary()
    tables = [f"{path.relative_to(ROOT)}:{line} names {', '.join(named)}"
              for path in sorted(PACKAGE.rglob("*.py")) if FACTS not in path.parents
              for line, named in dtype_tables(ast.parse(path.read_text(encoding="utf-8")), vocabulary)]
    assert tables == [], "dtype tables outside guiapp/facts (use guiapp.facts.dtypes):\n" + "\n".join(tables)


def test_the_contracts_see_the_imports_they_judge():
    """The graph reader itself: it finds a lazy Qt import, a relative import and a top-level one."""
    by_importer = {(i.importer, i.imported): i for i in IMPORTS}
    assert not by_importer[("guiapp.ui.launch", "guiapp.ui.app")].top_level
    assert by_importer[("guiapp.ui.background", "PySide6.QtCore")].top_level
    assert any(i.importer.startswith("guiapp.merging.methods.") and i.imported == "guiapp.merging.methods.base"
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


# What only the command line understands: a flag, huggingface_hub's variables, a command of Mergesmith's or the
# Hub's CLI. ("models--org--name", a cache folder's name, is no flag.)
CLI_WORDS = re.compile(r"(?<![\w/.-])--[a-z]|\bHF_[A-Z]|HTTPS_PROXY|`(?:hf|mergesmith) ")
ADVICE_KEYWORDS = ("hint", "why", "what", "fix")


def _advice_written_as_plain_text() -> list[str]:
    """Advice (an error's message, hint or why; an explanation's what, why or fix) written as plain text with
    command-line words in it: the window could only show it by rewriting it. The command-line package and the
    window's own words are not advice to both audiences."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(PACKAGE / "cli") or path.is_relative_to(PACKAGE / "ui"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            texts: list[ast.AST] = []
            if isinstance(node, ast.Call):
                texts += [keyword.value for keyword in node.keywords if keyword.arg in ADVICE_KEYWORDS]
                name = ast.unparse(node.func)
                if name.endswith("Error") and node.args:
                    texts.append(node.args[0])
            elif isinstance(node, ast.Dict):
                texts += [value for key, value in zip(node.keys, node.values)
                          if isinstance(key, ast.Constant) and key.value in ADVICE_KEYWORDS]
            for text in texts:
                written = _literal_text(text)
                if CLI_WORDS.search(written):
                    found.append(f"{path.relative_to(ROOT)}:{text.lineno}: {written[:90]}")
    return found


def _literal_text(node: ast.AST) -> str:
    """The literal parts of a string expression (a constant, an f-string, a concatenation); "" for anything else,
    a `say` call included (its template is judged by the sweep over every template)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_literal_text(value) for value in node.values)
    if isinstance(node, ast.BinOp):
        return _literal_text(node.left) + _literal_text(node.right)
    if isinstance(node, ast.IfExp):
        return _literal_text(node.body) + _literal_text(node.orelse)
    return ""


def _say_templates() -> list[tuple[str, ast.Call]]:
    """Every `say(…)` of the package: (where, the call)."""
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == FACTS / "wording.py":  # where `say` renders a nested field
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "say":
                calls.append((f"{path.relative_to(ROOT)}:{node.lineno}", node))
    return calls


def test_no_module_rewrites_advice_for_the_window():
    """Advice is written once with its command-line parts named (guiapp.facts.wording), never written for the
    command line and rewritten with patterns for the window."""
    import guiapp.jobs.fixes as fixes

    assert not hasattr(fixes, "window_text") and not hasattr(fixes, "_WINDOW_WORDS")
    assert _advice_written_as_plain_text() == []


def test_every_text_with_terms_says_no_command_line_words_in_the_window():
    """A sweep over every `say` template of the package (each field given a stand-in value), every term of the
    table and every catalogue entry: the window's rendering has no flag, variable or command."""
    from guiapp.facts.wording import TERMS, for_window, say
    from guiapp.system.error_catalogue import CATALOGUE

    templates = _say_templates()
    assert len(templates) > 30, "the sweep finds the templates"
    leaks = []
    for where, call in templates:
        template = call.args[0] if call.args else None
        assert isinstance(template, ast.Constant) and isinstance(template.value, str), \
            f"{where}: a template is a literal, its values keywords (so that this sweep sees it)"
        values = {keyword.arg: "X" for keyword in call.keywords if keyword.arg}
        shown = for_window(say(template.value, **values))
        if CLI_WORDS.search(shown):
            leaks.append(f"{where}: {shown}")
    for name, term in TERMS.items():
        if CLI_WORDS.search(term.for_window()) or CLI_WORDS.search(term.for_window("X")):
            leaks.append(f"the term {name}: {term.for_window('X')}")
    for entry in CATALOGUE:
        leaks += [f"{entry.key}: {for_window(text)}" for text in (entry.what, entry.why, entry.fix)
                  if CLI_WORDS.search(for_window(text))]
    assert leaks == []
