"""Recipe values as the window's text boxes show them, and back."""

from __future__ import annotations

from guiapp.jobs.recipe_text import slices_text, value_from_text, value_text


def test_a_long_list_stays_on_one_line_and_reads_back_the_same():
    gradient = [round(i / 100, 2) for i in range(60)]
    text = value_text(gradient)
    assert "\n" not in text and text.startswith("[0.0, 0.01")
    assert value_from_text(text) == gradient


def test_text_that_is_not_a_value_comes_back_as_written_for_the_check_to_report():
    assert value_from_text("[0.1, 0.2") == "[0.1, 0.2"
    assert value_from_text("") is None


def test_slices_show_layer_ranges_on_one_line():
    slices = [{"sources": [{"model": "org/a", "layer_range": [0, 4]}]}]
    assert "layer_range: [0, 4]" in slices_text(slices)
    assert slices_text(None) == "" and slices_text([]) == ""
