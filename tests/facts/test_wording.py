"""Texts written once for both audiences (guiapp.facts.wording): the command line's words and the window's."""

from __future__ import annotations

import copy
import pickle

import pytest

from guiapp.errors import SettingsError
from guiapp.facts.wording import SETTINGS, Said, each, for_window, join, say


@pytest.mark.parametrize("template, values, cli, window", [
    ("Example: {rank:32}", {}, "Example: --rank 32", "Example: a rank of 32"),
    ("Use {rank} or less.", {"rank": 8}, "Use --rank 8 or less.", "Use a rank of 8 or less."),
    ("Lower {scale}, or check it.", {}, "Lower --scale, or check it.", "Lower the strength, or check it."),
    ("Stored in bfloat16{aside:{dtype}}.", {}, "Stored in bfloat16 (--dtype).", "Stored in bfloat16."),
    ("{model} needs the Hub{aside:{offline_variable}}.", {"model": "org/a"},
     "org/a needs the Hub (HF_HUB_OFFLINE).", "org/a needs the Hub."),
    ("A {{literal}} brace", {}, "A {literal} brace", "A {literal} brace"),
    ("Apply it: {apply_lora}.", {"apply_lora": "/m/{x}"}, "Apply it: `mergesmith apply-lora --base BASE --adapter "
     "/m/{x} --out FOLDER`.", "Apply it: the Apply LoRA page."),
    ("{path} is damaged{aside:{dtype}}", {"path": "/m/{dtype}"}, "/m/{dtype} is damaged (--dtype)", "/m/{dtype} is damaged"),
])
def test_a_template_is_said_for_the_command_line_and_for_the_window(template, values, cli, window):
    said = say(template, **values)
    assert (str(said), for_window(said)) == (cli, window)


def test_a_plain_field_without_a_value_fails_where_the_text_is_written():
    with pytest.raises(KeyError):
        say("{no_such_term} is named")


def test_a_said_value_inside_another_text_keeps_the_window_words():
    inner = say("{go_online}, or use a downloaded model.")
    outer = say("org/a cannot be checked: {why}", why=inner)
    assert str(outer) == "org/a cannot be checked: Unset HF_HUB_OFFLINE to go online, or use a downloaded model."
    assert for_window(outer) == "org/a cannot be checked: Go online, or use a downloaded model."


def test_joining_and_changing_keep_both_audiences_and_plain_text_stays_plain():
    joined = join("It failed.", say("Example: {rank:32}"), None)
    assert (str(joined), for_window(joined)) == ("It failed. Example: --rank 32", "It failed. Example: a rank of 32")
    assert type(join("a", "b")) is str and join("a", "b") == "a b"
    upper = each(say("{hf_login}"), str.upper)
    assert (str(upper), for_window(upper)) == ("`HF AUTH LOGIN`", "SIGN IN…")


def test_an_error_keeps_both_audiences_across_copies_and_processes():
    error = SettingsError("Bad rank.", hint=say("Example: {rank:32}"))
    for copied in (pickle.loads(pickle.dumps(error)), copy.deepcopy(error)):
        assert isinstance(copied.hint, Said) and for_window(copied.hint) == "Example: a rank of 32"
        assert str(copied.hint) == "Example: --rank 32"


def test_a_remedy_setting_names_its_option():
    assert SETTINGS["output"].for_cli("/m/x") == "--out /m/x" and SETTINGS["output"].dest == "out"
    assert SETTINGS["overwrite"].for_cli() == "--overwrite"
