"""The fixes a failed job offers as buttons, and the window's wording of explanations (no flag, no variable)."""

from __future__ import annotations

import re
from dataclasses import asdict

import pytest

from guiapp.checkpoints.output_guard import REPLACE_OUTPUT, new_folder_remedy
from guiapp.errors import (
    BASE_TOKENIZER,
    ON_CPU,
    GatedModelError,
    HubUnreachableError,
    OutputError,
    Remedy,
    SettingsError,
)
from guiapp.facts.wording import for_window
from guiapp.jobs.fixes import (
    CHOOSE_FOLDER,
    OPEN_MODEL_PAGE,
    REPLACE,
    RETRY,
    RETRY_WITH,
    SIGN_IN,
    USE_OFFLINE,
    fix_actions,
)
from guiapp.system.error_catalogue import CATALOGUE
from guiapp.system.explain import explain

CLI_WORDS = re.compile(r"(?<![\w/.-])--[a-z]|HF_[A-Z]|hf auth")


def _actions(error, status="failed", output=None):
    return fix_actions(asdict(explain(error)), status, output)


def test_an_existing_output_offers_a_new_name_first_then_another_folder_then_an_explicit_replace(tmp_path):
    taken = tmp_path / "tiny-chat-ties"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    error = OutputError(f"{taken} already exists.", remedy=new_folder_remedy(tmp_path / "tiny-chat-ties-2"),
                        replace_with=REPLACE_OUTPUT)
    actions = _actions(error, output=str(taken))
    assert [a.action for a in actions] == [RETRY_WITH, CHOOSE_FOLDER, REPLACE, RETRY]
    assert actions[0].label == "Retry with a new name: tiny-chat-ties-2"
    assert actions[0].changes == {"output": str(tmp_path / "tiny-chat-ties-2")}
    replace = actions[2]
    assert replace.label == "Replace tiny-chat-ties…" and replace.changes == {"overwrite": True}
    assert "1 file" in replace.tooltip and "notes.txt" in replace.tooltip  # names what would be deleted


def test_a_gated_model_offers_its_page_and_sign_in():
    error = GatedModelError("org/gated is gated.", hint="Open https://huggingface.co/org/gated, accept the licence "
                            "there, then sign in with an access token (Mergesmith's Hub sign-in, or `hf auth login`).")
    actions = _actions(error)
    assert [a.action for a in actions] == [OPEN_MODEL_PAGE, SIGN_IN, RETRY]
    assert actions[0].url == "https://huggingface.co/org/gated"


def test_an_unreachable_hub_offers_offline_mode_and_a_cancelled_job_a_plain_retry():
    assert [a.action for a in _actions(HubUnreachableError("Can't reach the Hub."))] == [USE_OFFLINE, RETRY]
    assert [a.action for a in fix_actions(None, "cancelled")] == [RETRY]
    assert fix_actions(None, "done") == []


@pytest.mark.parametrize("remedy, words", [
    (ON_CPU, "Retry on the CPU"), (Remedy("dtype", "float32", "in float32"), "Retry in float32"),
    (BASE_TOKENIZER, "Retry with the base model's tokenizer"),
])
def test_a_remedy_is_a_button_in_its_own_words(remedy, words):
    [action, _retry] = _actions(SettingsError("It failed.", remedy=remedy))
    assert action.label == words and action.changes == {remedy.setting: remedy.value}


def test_a_suggestion_saved_by_the_previous_version_is_still_offered():
    actions = fix_actions({"retry_with": {"device": "cpu"}, "replace_with": {"overwrite": True},
                           "kind": "OutputError"}, "failed", "/models/merged")
    assert [(a.action, a.label, a.changes) for a in actions if a.action in (RETRY_WITH, REPLACE)] == [
        (RETRY_WITH, "Retry with the suggested settings", {"device": "cpu"}),
        (REPLACE, "Replace merged…", {"overwrite": True})]


@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda entry: entry.key)
def test_no_catalogue_explanation_shows_a_flag_or_variable_in_the_window(entry):
    for text in (entry.what, entry.why, entry.fix):
        shown = for_window(text)
        assert not CLI_WORDS.search(shown), shown


def _offline_error():
    from huggingface_hub import errors as hf

    from guiapp.hub.failures import translate

    return translate(hf.OfflineModeIsEnabled("offline"), "org/model")


def _rank_error():
    from guiapp.lora.lowrank import RankRule

    with pytest.raises(SettingsError) as caught:
        RankRule("fixed", 0).validate()
    return caught.value


def _scale_error():
    from guiapp.checkpoints.adapters import LoraAdapter

    with pytest.raises(SettingsError) as caught:
        LoraAdapter.open("/nowhere", scale=float("nan"))
    return caught.value


@pytest.mark.parametrize("make, cli_words, window_words", [
    (_offline_error, "Unset HF_HUB_OFFLINE to go online", "Go online, or use a model that is already downloaded."),
    (_rank_error, "Example: --rank 32", "Example: a rank of 32"),
    (_scale_error, "Example: --scale 0.5", "Example: a strength of 0.5"),
])
def test_one_error_says_what_to_do_to_each_audience(make, cli_words, window_words):
    """The same explanation: the command line's flag or variable, the window's own words (kept for the history)."""
    explanation = asdict(explain(make()))
    assert cli_words in explanation["fix"]
    shown = explanation["window"]["fix"]
    assert shown == window_words and not CLI_WORDS.search(shown)
    assert not CLI_WORDS.search(explanation["window"].get("what", explanation["what"]))


def test_a_suggested_new_name_taken_since_the_failure_is_replaced_by_a_free_one(tmp_path):
    taken = tmp_path / "big-ties"
    taken.mkdir()
    error = OutputError(f"{taken} already exists.", remedy=new_folder_remedy(tmp_path / "big-ties-2"))
    explanation = asdict(explain(error))
    (tmp_path / "big-ties-2").mkdir()  # written by another job after the failure (or before a restart)
    actions = fix_actions(explanation, "failed", str(taken))
    assert actions[0].label == "Retry with a new name: big-ties-3"
    assert actions[0].changes == {"output": str(tmp_path / "big-ties-3")}


def test_an_output_inside_an_input_model_offers_a_retry_beside_the_models(tmp_path):
    from guiapp.checkpoints.output_guard import check_output_location

    model = tmp_path / "models" / "tiny-chat"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    with pytest.raises(OutputError) as caught:
        check_output_location(model / "merged", [model], replace=False)
    actions = _actions(caught.value, output=str(model / "merged"))
    assert actions[0].action == RETRY_WITH and actions[0].changes == {"output": str(tmp_path / "models" / "merged")}
    assert actions[0].label == "Retry in models/merged, beside the models"
