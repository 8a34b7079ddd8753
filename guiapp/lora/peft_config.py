"""The PEFT configuration an adapter is attached with on the fly (try, perplexity): the adapter's own settings,
with every pattern replaced by the module names it resolves to.

PEFT matches a `target_modules` string, `exclude_modules`, `layers_pattern` and the keys of `rank_pattern` /
`alpha_pattern` as regexes over every module name, with no time bound, so a pattern that backtracks would run
without end. Mergesmith resolves them once, with bounded regexes (`guiapp.hub.adapter_config`), against the
modules the adapter's weights actually change, and hands PEFT exact names only.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from guiapp.checkpoints.adapters import LoraAdapter
from guiapp.errors import CheckpointError


def resolved_lora_config(folder: Path) -> Any:
    """A `peft.LoraConfig` for the adapter in `folder` that names each adapted module exactly, with its rank and
    alpha, and holds no pattern from the file.

    Raises CheckpointError as `LoraAdapter.open` does (a bad field, a pattern past its time bound, not a LoRA
    adapter), or when PEFT refuses the adapter's other settings.
    """
    import peft  # noqa: PLC0415 - peft takes seconds to load; only jobs that run an adapter need it

    adapter = LoraAdapter.open(folder)
    config = adapter.config
    known = {field.name for field in dataclasses.fields(peft.LoraConfig)}
    values = {name: value for name, value in config.document.items() if name in known}
    values.update(
        target_modules=sorted(adapter.modules),
        exclude_modules=None,
        layers_to_transform=None,
        layers_pattern=None,
        rank_pattern={re.escape(name): lora.rank for name, lora in adapter.modules.items() if lora.rank != config.r},
        alpha_pattern={re.escape(name): lora.alpha for name, lora in adapter.modules.items()
                       if lora.alpha != config.lora_alpha},
    )
    try:
        return peft.LoraConfig(**values)
    except (TypeError, ValueError) as error:
        raise CheckpointError(
            f"PEFT cannot use the settings in {config.path}: {str(error).splitlines()[0] if str(error) else error}.",
            hint="Restore the adapter's original adapter_config.json (as PEFT saved it), or download it again.",
        ) from None
