"""The Experts page's check before Run: the configuration its form describes, planned from the models' headers,
with the output folder and the estimate, as the job itself checks them when it starts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from guiapp.system.units import format_bytes


def check_experts(document: dict[str, Any], device: str, out: Path, overwrite: bool, probe_result: Any = None) -> str:
    """The one-line summary of the assembly `document` (a mergekit-moe configuration) describes: architecture,
    experts, output size and time. Raises what the job would raise before writing: RecipeError for the
    configuration, IncompatibleModelsError for an expert that does not fit the base, OutputError for the folder,
    InsufficientResourcesError when it will not fit, and the header readers' errors."""
    from guiapp.checkpoints.output_guard import check_output_location
    from guiapp.jobs.estimates import estimate_moe
    from guiapp.moe.assemble import plan_moe
    from guiapp.moe.config import moe_config_from_dict

    config = moe_config_from_dict(copy.deepcopy(document))
    plan = plan_moe(config, device, probe_result)
    inputs = tuple(folder for ref in config.models() if (folder := ref.existing_folder()) is not None)
    check_output_location(out, inputs, replace=overwrite)
    estimate = estimate_moe(plan, out, probe_result)
    if not estimate.fit.fits:
        raise estimate.fit.as_error()
    time = f", {estimate.time}" if estimate.time else ""
    return (f"A {plan.architecture.name} model with {len(config.experts)} experts, "
            f"{config.experts_per_token} per token: {format_bytes(plan.output_bytes)}{time}.")
