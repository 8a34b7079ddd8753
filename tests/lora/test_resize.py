"""`mergesmith lora-resize` on adapters PEFT made: each module's best lower-rank update, loadable by PEFT."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from guiapp.__main__ import main
from guiapp.cli.process import EXIT_FAILED, EXIT_OK
from guiapp.errors import SettingsError
from guiapp.lora.resize import ResizeSettings, resize_adapter
from tests.lora.helpers import adapter_config, adapter_tensors
from tests.lora.peft_adapters import write_peft_adapter
from tests.tryout.models import write_causal

PREFIX = "base_model.model."


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return write_causal(tmp_path_factory.mktemp("resize") / "base", torch.float32, seed=21)


@pytest.fixture(scope="module")
def rank8(base: Path) -> Path:
    """Rank 8 with rsLoRA (scale alpha/√r), the down projections at rank 6 by rank_pattern."""
    return write_peft_adapter(base, base.parent / "rank8", seed=4, r=8, lora_alpha=12, use_rslora=True,
                              rank_pattern={"down_proj": 6})


def _updates(folder: Path) -> dict[str, torch.Tensor]:
    """Each module's update B·A·scale, as PEFT computes it from the adapter it loads."""
    import peft
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder.parent / "base", dtype=torch.float32)
    loaded = peft.PeftModel.from_pretrained(model, folder)
    return {name.removeprefix(PREFIX): module.get_delta_weight("default").detach()
            for name, module in loaded.named_modules() if hasattr(module, "get_delta_weight") and
            "default" in getattr(module, "lora_A", {})}


def _best(update: torch.Tensor, rank: int) -> torch.Tensor:
    u, s, vh = torch.linalg.svd(update.double(), full_matrices=False)
    return ((u[:, :rank] * s[:rank]) @ vh[:rank]).float()


def test_rank_gives_each_module_its_best_approximation_and_peft_loads_it(base, rank8, tmp_path, capsys):
    before = {p.name: hashlib.sha256(p.read_bytes()).digest() for p in rank8.iterdir()}
    out = base.parent / "resized"
    assert main(["lora-resize", str(rank8), "--rank", "3", "--out", str(out), "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert {p.name: hashlib.sha256(p.read_bytes()).digest() for p in rank8.iterdir()} == before

    original, resized = _updates(rank8), _updates(out)
    assert set(resized) == set(original)
    for module, update in original.items():
        assert torch.allclose(resized[module], _best(update, 3), atol=1e-6), module
    by_module = {m["module"]: m for m in report["modules"]}
    down = by_module["model.layers.0.mlp.down_proj"]
    assert (down["rank_before"], down["rank"]) == (6, 3)
    update = original["model.layers.0.mlp.down_proj"].double()
    s = torch.linalg.svdvals(update)
    assert down["energy_kept"] == pytest.approx(float(s[:3].square().sum() / s.square().sum()), abs=1e-6)
    config = adapter_config(out)
    assert (config["r"], config["lora_alpha"], config["use_rslora"]) == (3, 3, False)
    card = (out / "README.md").read_text()
    assert str(rank8) in card and "rank 3" in card


def test_energy_keeps_the_fewest_directions_holding_that_fraction(base, rank8, tmp_path):
    summary = resize_adapter(ResizeSettings(str(rank8), tmp_path / "out", energy=0.8))
    original = _updates(rank8)
    tensors = adapter_tensors(tmp_path / "out")
    for entry in summary["modules"]:
        s = torch.linalg.svdvals(original[entry["module"]].double()).square()
        fractions = torch.cumsum(s, 0) / s.sum()
        expected = int((fractions < 0.8 - 1e-9).sum()) + 1
        assert entry["rank"] == expected and entry["energy_kept"] >= 0.8 - 1e-6
        assert tensors[f"{PREFIX}{entry['module']}.lora_A.weight"].shape[0] == expected
    assert [(m["module"], m["retained_energy"]) for m in summary["module_energies"]] == [
        (m["module"], m["energy_kept"]) for m in summary["modules"]]  # what the extraction's chart reads
    ranks = {entry["rank"] for entry in summary["modules"]}
    assert len(ranks) > 1 and adapter_config(tmp_path / "out")["rank_pattern"]


def test_a_rank_that_would_keep_everything_is_refused(rank8, tmp_path):
    with pytest.raises(SettingsError, match="ranks are at most 8, so rank 8 would keep everything"):
        resize_adapter(ResizeSettings(str(rank8), tmp_path / "out", rank=8))
    with pytest.raises(SettingsError, match="between 0 and 1"):
        resize_adapter(ResizeSettings(str(rank8), tmp_path / "out", energy=1.5))
    assert not (tmp_path / "out").exists()


def test_a_model_folder_or_a_missing_folder_is_explained(base, tmp_path, capsys):
    for folder in (base, tmp_path / "nowhere"):
        code = main(["lora-resize", str(folder), "--rank", "2", "--out", str(tmp_path / "out")])
        err = " ".join(capsys.readouterr().err.split())
        assert code == EXIT_FAILED and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_the_output_may_not_replace_the_input(rank8, capsys):
    code = main(["lora-resize", str(rank8), "--rank", "2", "--out", str(rank8), "--overwrite"])
    assert code == EXIT_FAILED and (rank8 / "adapter_model.safetensors").is_file()


def test_dora_magnitudes_are_carried_over(base, tmp_path):
    from tests.lora.peft_adapters import peft_merged

    dora = write_peft_adapter(base, tmp_path / "dora", seed=6, use_dora=True, magnitude_noise=0.1)
    resize_adapter(ResizeSettings(str(dora), tmp_path / "small", rank=2))
    key = f"{PREFIX}model.layers.0.self_attn.q_proj.lora_magnitude_vector"
    assert torch.equal(adapter_tensors(tmp_path / "small")[key], adapter_tensors(dora)[key])
    assert peft_merged(base, tmp_path / "small")  # PEFT loads and merges it
