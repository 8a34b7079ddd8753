"""The Hub in use, read before and after huggingface_hub is loaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _endpoints(environment: dict[str, str]) -> list[str]:
    """The endpoint before huggingface_hub is imported, once it is, and after its setting is changed."""
    script = ("import sys; from guiapp.facts.hub import hub_endpoint; before = hub_endpoint(); "
              "from huggingface_hub import constants; loaded = hub_endpoint(); "
              "constants.ENDPOINT = 'http://127.0.0.2:8/'; print(before, loaded, hub_endpoint())")
    env = {key: value for key, value in os.environ.items() if key != "HF_ENDPOINT"} | environment
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=60, check=True)
    return done.stdout.split()


def test_the_endpoint_follows_hf_endpoint_then_huggingface_hubs_own_setting():
    assert _endpoints({"HF_ENDPOINT": "http://127.0.0.1:9/"}) == ["http://127.0.0.1:9"] * 2 + ["http://127.0.0.2:8"]


def test_without_hf_endpoint_it_is_the_public_hub():
    assert _endpoints({}) == ["https://huggingface.co"] * 2 + ["http://127.0.0.2:8"]
