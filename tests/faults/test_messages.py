"""Fault class "messages": no exception raised inside Mergesmith reaches the user as "does not recognise this error".

Two halves. A sweep of the source: every `raise SomeClass(...)` in guiapp/ raises a MergesmithError subclass
(message and hint written for the user) or a class whose sites are internal checks, explained as Mergesmith's own
bug with a report to send. Then the hostile input classes through the real CLI.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import types
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import guiapp
from guiapp.__main__ import main
from guiapp.errors import MergesmithError
from guiapp.system.explain import explain
from tests.faults.harness import cli_explanation

SOURCE = Path(guiapp.__file__).parent
UNRECOGNISED = "does not recognise"
# Classes raised in guiapp/ that are not MergesmithErrors, and why a user never meets them as "not recognised".
INTERNAL = {
    "ValueError": "preconditions of internal helpers (a dtype list, a size parser its callers wrap, probe data "
                  "format); one reaching the user is Mergesmith's bug, explained as an internal problem",
    "RuntimeError": "the output writer's own consistency checks: an internal problem",
    "OSError": "output_guard's rename without replace: its callers turn it into OutputError",
    "FileExistsError": "output_guard's lock: its callers turn it into OutputError",
    "FileNotFoundError": "a broken installation's resource folder, raised with a message saying what to do",
    "SelfTestFailed": "the packaged app's self-test, printed by the self-test itself",
    "_ExpansionError": "bounded.py's YAML alias bound, caught there and re-raised as the caller's error",
}
# Process control, handled by the CLI and Python themselves (argparse prints an ArgumentTypeError as a usage error).
CONTROL_FLOW = {"KeyboardInterrupt", "SystemExit", "ArgumentTypeError"}


def _raised_classes() -> dict[str, list[str]]:
    """{class name: ["file:line", …]} for every `raise Name(...)` / `raise module.Name` in guiapp/."""
    found: dict[str, list[str]] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        if path.name == "__main__.py":  # `raise SystemExit(main())`; importing it would run the CLI
            continue
        module = ".".join(path.relative_to(SOURCE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
            if name and name.lstrip("_")[:1].isupper():  # a class; lower-case names are errors built by helpers
                found.setdefault(name, []).append(f"{module}:{node.lineno}")
    return found


def _resolve(name: str, site: str) -> type[BaseException]:
    module = importlib.import_module(site.split(":")[0].removesuffix(".__init__"))
    found = getattr(module, name, None) or getattr(builtins, name, None)
    if found is None:  # raised as `module.Name`: look in the modules the raising module imported
        found = next((getattr(m, name) for m in vars(module).values()
                      if isinstance(m, types.ModuleType) and isinstance(getattr(m, name, None), type)), None)
    assert isinstance(found, type) and issubclass(found, BaseException), f"{name} at {site} is not a class"
    return found


def _traceback_inside_mergesmith():
    from guiapp.checkpoints.writing import parse_size  # noqa: PLC0415 - any raise site inside guiapp will do

    try:
        parse_size("not a size")
    except ValueError as error:
        return error.__traceback__
    raise AssertionError("parse_size accepted 'not a size'")


def test_every_class_raised_in_mergesmith_is_explained(seen):
    raised = _raised_classes()
    foreign = {}
    for name, sites in raised.items():
        cls = _resolve(name, sites[0])
        if not issubclass(cls, MergesmithError) and name not in CONTROL_FLOW:
            foreign[name] = (cls, sites)
    assert set(foreign) <= set(INTERNAL), f"raised without a MergesmithError class: {set(foreign) - set(INTERNAL)}"
    inside = _traceback_inside_mergesmith()
    for name, (cls, sites) in foreign.items():
        error = cls.__new__(cls)
        Exception.__init__(error, f"an internal check at {sites[0]} failed")
        explanation = explain(error.with_traceback(inside))
        assert explanation.recognised and UNRECOGNISED not in explanation.title, (name, explanation.title)
    total = sum(len(sites) for sites in raised.values())
    seen("messages", f"source sweep: {total} raise sites of {len(raised)} classes",
         f"{len(raised) - len(foreign)} are Mergesmith errors or process control; {len(foreign)} internal checks "
         "explained as Mergesmith's own problem")


def test_an_internal_check_that_fails_is_explained_as_mergesmiths_bug(seen):
    error = ValueError("x")
    explanation = explain(error.with_traceback(_traceback_inside_mergesmith()))
    assert explanation.title == "Mergesmith stopped on an internal problem" and "report" in explanation.fix
    foreign = explain(ValueError("raised by a library, not by Mergesmith"))
    assert not foreign.recognised, "an exception from outside Mergesmith must not be claimed as its own bug"
    seen("messages", "an internal check that fails", f"{explanation.title}: {explanation.what}")


def _linear(*models: Path | str) -> str:
    return "merge_method: linear\nmodels:\n" + "".join(
        f"  - model: {m}\n    parameters: {{weight: 1}}\n" for m in models)


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    title, what = cli_explanation(captured.err) if code else ("", "")
    return code, title, what


def test_the_output_parent_is_a_file(trio, tmp_path, capsys, seen):
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_linear(trio.one, trio.two))
    (tmp_path / "results.csv").write_text("a,b\n")

    code, title, what = _cli(capsys, "merge", str(recipe), str(tmp_path / "results.csv" / "merged"))

    assert code == 1 and UNRECOGNISED not in title, (title, what)
    seen("messages", "output folder inside a file", f"{title}: {what}")


def test_a_layer_index_of_5000_digits(trio, tmp_path, capsys, seen):
    huge = "9" * 5000
    models = []
    for seed in (1, 2):
        folder = tmp_path / f"odd{seed}"
        folder.mkdir()
        (folder / "config.json").write_text((trio.one / "config.json").read_text())
        generator = torch.Generator().manual_seed(seed)
        save_file({f"model.layers.{huge}.mlp.weight": torch.randn(4, 4, generator=generator),
                   "model.norm.weight": torch.ones(4)}, str(folder / "model.safetensors"))
        models.append(folder)
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_linear(*models))

    code, title, what = _cli(capsys, "merge", str(recipe), str(tmp_path / "out"))

    assert UNRECOGNISED not in title, (title, what)
    seen("messages", "a tensor with a 5,000-digit layer index", f"{title}: {what}" if code else "Done")


@pytest.mark.parametrize(("case", "fields"), [("sha null", {"sha": None}), ("lastModified unparseable",
                                                                                {"lastModified": "soon"})])
def test_odd_hub_model_info_in_a_merge(hub_env, trio, tmp_path, capsys, seen, case, fields):
    from tests.support.hub_server import make_hostile  # noqa: PLC0415

    hub_env.server.add_model("org/model", trio.two)
    make_hostile(hub_env.server).info_fields.update(fields)
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(_linear(trio.one, "org/model"))

    code, title, what = _cli(capsys, "merge", str(recipe), str(tmp_path / "out"))

    assert code == 1 and UNRECOGNISED not in title, (title, what)
    seen("messages", f"merge with a Hub model whose info has {case}", f"{title}: {what}")
