"""A remedy is one object: the CLI prints it as the flag of the command that ran, the window offers it as a Retry
button, and the retried job takes its setting, from one table of settings."""

from __future__ import annotations

import argparse
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from guiapp.checkpoints.output_guard import REPLACE_OUTPUT, new_folder_remedy
from guiapp.errors import BASE_TOKENIZER, ON_CPU, DeviceError, OutputError, Remedy
from guiapp.jobs.fixes import RETRY_WITH, fix_actions
from guiapp.jobs.remedies import as_flag
from guiapp.jobs.specs import JOB_KINDS, RECIPE_SETTINGS, retry
from guiapp.system.error_catalogue import CATALOGUE
from guiapp.system.explain import explain
from tests.jobs.test_job_kinds import SAMPLES


def _options(*dests: str):
    """What the CLI asks of the command that ran: does it have this option?"""
    args = argparse.Namespace(**dict.fromkeys(dests))
    return lambda dest: hasattr(args, dest)


def test_one_remedy_is_a_flag_on_the_command_line_and_a_button_in_the_window():
    remedy = Remedy("compute_dtype", "float32", "in float32")
    error = DeviceError("Extracting cannot compute in float64 on mps.", remedy=remedy)
    assert explain(error).render_text(details=False, retry=lambda r: as_flag(r, _options("compute_dtype"))).endswith(
        "Retry with: --compute-dtype float32")
    [button, _plain_retry] = fix_actions(asdict(explain(error)))
    assert (button.action, button.label, button.changes) == (RETRY_WITH, "Retry in float32",
                                                               {"compute_dtype": "float32"})
    assert retry("extract", SAMPLES["extract"], button.changes).spec["compute_dtype"] == "float32"


def test_a_new_output_folder_is_the_same_setting_for_every_kind_and_the_clis_out(tmp_path):
    remedy = new_folder_remedy(tmp_path / "adapter-2")
    assert as_flag(remedy, _options("out", "device")) == f"Retry with: --out {tmp_path / 'adapter-2'}"
    for kind in ("merge", "extract", "apply"):
        assert retry(kind, SAMPLES[kind], remedy.changes).spec["output"] == str(tmp_path / "adapter-2")


def test_a_command_without_the_option_prints_no_flag():
    assert as_flag(new_folder_remedy(Path("/m/merged-2")), _options("out_dir", "device")) is None  # merge's
    assert as_flag(BASE_TOKENIZER, _options("out", "device", "dtype")) is None  # a recipe key: window only
    assert as_flag(ON_CPU, _options("device")) == "Retry with: --device cpu"


def test_a_replacement_is_the_clis_overwrite_and_the_windows_replace_button(tmp_path):
    taken = tmp_path / "merged"
    taken.mkdir()
    explanation = asdict(explain(OutputError(f"{taken} exists.", remedy=new_folder_remedy(tmp_path / "merged-2"),
                                             replace_with=REPLACE_OUTPUT)))
    assert as_flag(REPLACE_OUTPUT, _options("overwrite")) == "Retry with: --overwrite"
    replace = next(a for a in fix_actions(explanation, "failed", str(taken)) if a.changes == {"overwrite": True})
    assert replace.label == "Replace merged…"


_REMEDIES = [ON_CPU, BASE_TOKENIZER, REPLACE_OUTPUT] + [entry.remedy for entry in CATALOGUE if entry.remedy]


@pytest.mark.parametrize("remedy", _REMEDIES, ids=lambda remedy: f"{remedy.setting}={remedy.value}")
def test_every_remedy_changes_a_setting_a_job_has(remedy):
    settings = {f.name for kind in JOB_KINDS.values() for f in fields(kind.spec)} | set(RECIPE_SETTINGS)
    assert remedy.setting in settings or remedy.setting == "force_download"  # a retried job reads files again
    assert remedy.label
