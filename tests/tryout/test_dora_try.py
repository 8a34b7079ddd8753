"""`try` and `perplexity` on a base with a DoRA adapter made by PEFT, in float16 on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from guiapp.__main__ import main
from guiapp.cli.process import EXIT_OK
from guiapp.inference.running import GenerationSettings, generate, load_model, resolve_sources
from tests.lora.peft_adapters import write_peft_adapter
from tests.tryout.models import SENTENCES, write_causal


@pytest.fixture(scope="module")
def fp16_base(tmp_path_factory) -> Path:
    return write_causal(tmp_path_factory.mktemp("dora") / "base-fp16", torch.float16, seed=5)


@pytest.fixture(scope="module")
def fp16_dora(fp16_base: Path) -> Path:
    return write_peft_adapter(fp16_base, fp16_base.parent / "dora", seed=8, magnitude_noise=0.2, use_dora=True)


def test_an_fp16_dora_adapter_runs_in_fp16_on_the_cpu(fp16_base, fp16_dora):
    # The seed failure ("addmm_impl_cpu_" not implemented for 'Half') came from PEFT's DoRA set-up in float16.
    loaded = load_model(resolve_sources([f"{fp16_base}+{fp16_dora}"])[0], torch.float16, "cpu")
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float16}
    result = generate(loaded, "the cat sat", GenerationSettings(max_new_tokens=4))
    plain = generate(load_model(resolve_sources([str(fp16_base)])[0], torch.float16, "cpu"), "the cat sat",
                     GenerationSettings(max_new_tokens=4))
    assert result.text.strip() and result.token_ids != plain.token_ids


def test_try_and_perplexity_run_an_fp16_base_with_a_dora_adapter(fp16_base, fp16_dora, probe_in_cache, tmp_path,
                                                                  capsys):
    adapted = f"{fp16_base}+{fp16_dora}"
    assert main(["try", adapted, "--prompt", "the cat sat", "--max-new-tokens", "4"]) == EXIT_OK
    assert capsys.readouterr().out.split("===")[-1].strip()
    text = tmp_path / "text.txt"
    text.write_text(" ".join(SENTENCES))
    assert main(["perplexity", str(fp16_base), adapted, "--text", str(text), "--json"]) == EXIT_OK
    plain, with_dora = (json.loads(line)["perplexity"] for line in capsys.readouterr().out.splitlines())
    assert plain > 1 and with_dora > 1 and plain != with_dora
