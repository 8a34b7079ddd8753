"""Base models and adapters named by Hub id (served by the test Hub): the adapter records the Hub id."""

from __future__ import annotations

from pathlib import Path

from guiapp.lora.apply import ApplySettings, apply_lora
from tests.lora.helpers import adapter_config, extract, max_relative_difference, model_tensors
from tests.support.fixtures import hub_env, hub_server  # noqa: F401 - pytest fixtures


def test_hub_base_and_hub_adapter(hub_env, llama_base, llama_planted, tmp_path):
    hub_env.server.add_model("acme/base", llama_base)
    summary = extract("acme/base", llama_planted, tmp_path / "lora")
    folder = Path(summary["output"])
    assert adapter_config(folder)["base_model_name_or_path"] == "acme/base"
    assert "base_model: acme/base" in (folder / "README.md").read_text()

    hub_env.server.add_model("acme/lora", folder)
    apply_lora(ApplySettings("acme/base", "acme/lora", tmp_path / "full"))
    assert max_relative_difference(model_tensors(tmp_path / "full"), model_tensors(llama_planted)) < 1e-5
