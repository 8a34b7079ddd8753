"""Writing a PEFT adapter folder made from other adapters (resized or combined): weights, configuration, card
and report, through the staging rules every output follows (nothing appears at the destination unless complete)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import yaml

from guiapp.checkpoints.peft_format import ADAPTER_CONFIG
from guiapp.checkpoints.writing import PlannedTensor, ShardedWriter, StagedOutput, check_free_space
from guiapp.progress import Progress


def write_adapter(
    out: Path, tensors: dict[str, torch.Tensor], config: dict[str, Any], card: str, report: tuple[str, dict],
    *, inputs: tuple[Path, ...], overwrite: bool, kind: str, progress: Progress,
) -> Path:
    """Write `tensors` (adapter_model.safetensors), `config` (adapter_config.json), the README `card` and the
    report (file name, contents) into a new folder at `out`; return the folder.

    Raises OutputError when `out` may not be written (an input, the Hugging Face cache, an existing folder that is
    not an earlier output to overwrite) and InsufficientResourcesError for a full disk; nothing is left at `out`.
    """
    plan = [PlannedTensor(name, tuple(tensor.shape), tensor.dtype) for name, tensor in tensors.items()]
    with StagedOutput(out, overwrite=overwrite, inputs=inputs, kind=kind) as staged:
        check_free_space(staged.path, sum(p.nbytes for p in plan))
        progress.start_stage("Writing the adapter", total=len(plan), bytes_total=sum(p.nbytes for p in plan))
        writer = ShardedWriter(staged.path, plan, max_shard_bytes=2**62, filename_prefix="adapter_model")
        try:
            for planned in plan:
                writer.write(planned.name, tensors[planned.name].contiguous())
                progress.step(planned.name, nbytes=planned.nbytes)
            writer.close()
        except BaseException:
            writer.abort()
            raise
        (staged.path / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
        (staged.path / "README.md").write_text(card)
        name, contents = report
        (staged.path / name).write_text(json.dumps(contents, indent=2) + "\n")
        return staged.commit(progress)


def adapter_card(config: dict[str, Any], title: str, lines: list[str]) -> str:
    """A model card for a PEFT adapter: front matter naming its base, `title`, `lines` and how to load it."""
    base = config.get("base_model_name_or_path")
    front = yaml.safe_dump({"library_name": "peft", **({"base_model": base} if base else {}),
                            "tags": ["lora", "mergesmith"]}, sort_keys=False).strip()
    return "\n".join([
        "---", front, "---", "", f"# {title}", "", *lines, "",
        "```python", "from peft import PeftModel",
        'model = PeftModel.from_pretrained(base_model, "path/to/this/folder")', "```", "",
    ])
