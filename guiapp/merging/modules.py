"""Recipes of several modules (mergekit's `modules:`): a vision-language model's language model, vision tower and
projector each merged with their own `models:`/`slices:` and parameters, everything else copied from the base.

A module's tensors are found from their names: the module's prefix as mergekit's architecture files give it
(`language_model.` for `text_decoder`, `vision_tower.` …), with or without transformers' newer leading `model.`.
Each module is planned on its own by `plan.build_plan`, as if its tensors were a model of their own; the plans
are then put together and the output config gets each module's new layer count.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from guiapp.checkpoints.sources import ModelHeaders
from guiapp.checkpoints.tensor_roles import split_layer_name
from guiapp.errors import RecipeError
from guiapp.facts.dtypes import dtype_name
from guiapp.hub.references import ModelRef
from guiapp.merging.plan import MergePlan, TensorInput, TensorTask, build_plan, compute_dtype_of
from guiapp.merging.recipe import Recipe

# Module name → the tensor-name prefixes of its tensors, and the config section holding its layer count.
# A module not listed here is found by its own name as a prefix.
MODULE_PREFIXES: dict[str, tuple[str, ...]] = {
    "text_decoder": ("language_model.", "lm_head."),
    "vision_tower": ("vision_tower.", "vision_model."),
    "multi_modal_projector": ("multi_modal_projector.",),
}
MODULE_CONFIG_SECTIONS = {"text_decoder": "text_config", "vision_tower": "vision_config"}


def module_of(name: str, module: str) -> bool:
    """Whether the tensor `name` belongs to `module` (the prefixes above, also after a leading `model.`)."""
    prefixes = MODULE_PREFIXES.get(module, (f"{module}.",))
    bare = name.removeprefix("model.")
    return any(name.startswith(prefix) or bare.startswith(prefix) for prefix in prefixes)


def build_modular_plan(recipe: Recipe, headers: dict[ModelRef, ModelHeaders], compute_as_recipe: bool = False
                       ) -> MergePlan:
    """Plan a recipe of several modules: each module's tensors merged as its own recipe says, the tensors of
    no module copied from the base model (or the first model); computed as `build_plan` says for the module of the
    largest output.

    Raises RecipeError for a module that matches no tensor of its models, and whatever `build_plan` raises for
    a module (its messages name the module's tensors).
    """
    assert recipe.modules
    refs = recipe.model_refs()
    models = [headers[ref] for ref in refs]
    config_model = refs.index(recipe.base_model) if recipe.base_model in refs else 0
    tasks: list[TensorTask] = []
    warnings = list(recipe.warnings)
    sub_plans: dict[str, MergePlan] = {}
    for name, module in recipe.modules.items():
        own = {ref: ModelHeaders(ref, {n: i for n, i in headers[ref].tensors.items() if module_of(n, name)},
                                 headers[ref].config, headers[ref].applied)
               for ref in module.model_refs()}
        if not any(h.tensors for h in own.values()):
            found = sorted({n.removeprefix("model.").split(".")[0] for h in headers.values() for n in h.tensors})
            raise RecipeError(
                f"The module `{name}` matches no tensor of its models.",
                why=f"A module's tensors are found by their names; these models' tensors start with {', '.join(found)}.",
                hint="Use the module names of mergekit's architecture files (text_decoder, vision_tower, "
                "multi_modal_projector), or `slices:` for a text-only model.",
                key=("modules", name),
            )
        sub = build_plan(module, own)
        sub_plans[name] = sub
        warnings += [f"modules.{name}: {warning}" for warning in sub.warnings[len(module.warnings):]]
        index = [refs.index(m.ref) for m in sub.models]
        for task in sub.tasks:
            task.inputs = [dataclasses.replace(item, model=index[item.model],
                                               pad_from=None if item.pad_from is None else (index[item.pad_from[0]], item.pad_from[1]))
                           for item in task.inputs]
            tasks.append(task)
    copied = models[config_model]
    for tensor, info in copied.tensors.items():
        if not any(module_of(tensor, name) for name in recipe.modules):
            tasks.append(TensorTask(tensor, info.shape, [TensorInput(config_model, tensor)], None, [], {}, copy=True,
                                    floating=info.dtype.is_floating_point))
    largest = max(sub_plans.values(), key=lambda p: p.output_bytes)
    exact = max((p.compute_dtype for p in sub_plans.values()), key=lambda d: d.itemsize)
    compute_dtype = compute_dtype_of(largest.method, largest.read_dtype, models[config_model], exact, compute_as_recipe)
    plan = MergePlan(recipe, largest.method, models, tasks, largest.read_dtype, compute_dtype, largest.out_dtype,
                     None, config_model, config_model, warnings, compute_as_recipe=compute_as_recipe)
    plan.config = _output_config(copied.config, plan, sub_plans)
    return plan


def _output_config(config: dict[str, Any] | None, plan: MergePlan, sub_plans: dict[str, MergePlan]) -> dict | None:
    """The base's config with the output dtype and each module's layer count (`text_config.num_hidden_layers`…)."""
    if config is None:
        return None
    config = {key: dict(value) if isinstance(value, dict) else value for key, value in config.items()}
    name = dtype_name(plan.out_dtype)
    config["torch_dtype"] = name
    if "dtype" in config:
        config["dtype"] = name
    for module, sub in sub_plans.items():
        section = config.get(MODULE_CONFIG_SECTIONS.get(module, ""))
        indices = {parts.index for parts in (split_layer_name(t.name) for t in sub.tasks) if parts is not None}
        if isinstance(section, dict) and "num_hidden_layers" in section and indices:
            section["num_hidden_layers"] = len(indices)
    return config
