"""What the merge and the adapter's application count as their work, which their bar and time left follow: each
tensor's own cost besides its bytes, and an update's work where the adapter adds one."""

from __future__ import annotations

from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
from guiapp.lora.apply import ApplySettings, apply_lora
from guiapp.lora.extract import ExtractionSettings, extract_lora
from guiapp.lora.lowrank import RankRule
from guiapp.merging.merge import MergeSettings, run_merge
from guiapp.merging.recipe import parse_recipe
from guiapp.progress import Progress

SHAPE = LlamaShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=512)


def _steps(events, stage: str) -> dict[str, tuple[int, float]]:
    """Each step of `stage` by its item: (bytes, work) it added."""
    steps, before = {}, None
    for event in events:
        if event.stage != stage:
            continue
        if before is not None and event.item:
            steps[event.item] = (event.bytes_done - before.bytes_done, event.work_done - before.work_done)
        before = event
    return steps


def test_a_merge_counts_each_tensors_own_cost_besides_its_bytes(tmp_path):
    """A norm's few bytes took as long as reading megabytes (handing the tensor between threads, its statistics):
    counted by bytes alone, the many small tensors of a small model looked free and the time left came out short
    of the real one near the end."""
    base = write_llama(tmp_path / "base", SHAPE, seed=0)
    tune = write_llama_finetune(tmp_path / "tune", base, seed=1)
    events = []
    recipe = parse_recipe(f"merge_method: linear\nmodels:\n  - model: {base}\n    parameters: {{weight: 0.5}}\n"
                          f"  - model: {tune}\n    parameters: {{weight: 0.5}}\n")
    run_merge(recipe, MergeSettings(tmp_path / "out"), Progress(on_event=events.append))
    steps = _steps(events, "Merging")
    norm_bytes, norm_work = steps["model.layers.0.input_layernorm.weight"]
    matrix_bytes, matrix_work = steps["model.layers.0.mlp.up_proj.weight"]
    assert norm_work > 100 * norm_bytes
    assert norm_work - norm_bytes == matrix_work - matrix_bytes > 0
    final = [e for e in events if e.stage == "Merging"][-1]
    assert final.fraction == 1.0 and final.work_done == final.work_total


def test_applying_an_adapter_counts_an_updated_tensor_above_a_copied_one(tmp_path):
    """A tensor the adapter updates is computed in float32 and cast back, two to three times a plain copy's time
    per byte: by bytes alone, the copied embeddings made the bar run ahead and the time left half the real one."""
    base = write_llama(tmp_path / "base", SHAPE, seed=0)
    tune = write_llama_finetune(tmp_path / "tune", base, seed=1)
    adapter = tmp_path / "adapter"
    extract_lora(ExtractionSettings(base=str(base), model=str(tune), out=adapter, rule=RankRule("fixed", 4, None),
                                    embeddings="skip"))
    events = []
    apply_lora(ApplySettings(str(base), str(adapter), tmp_path / "applied"), Progress(on_event=events.append))
    steps = _steps(events, "Applying the adapter")
    copied_bytes, copied_work = steps["model.embed_tokens.weight"]
    updated_bytes, updated_work = steps["model.layers.0.mlp.up_proj.weight"]
    assert copied_work == copied_bytes
    assert updated_work >= 2 * updated_bytes
