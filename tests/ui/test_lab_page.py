"""The Lab page driven as a new user would: the Merge page's recipe is there already, a text is chosen, the search
runs with its chart and table filling in, "Use this recipe" takes the best back to the Merge page, and "Try it" puts
the best beside the recipe as given on the Try page, merged into the lab's folder once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.lab.conftest import planted  # noqa: F401 - the tiny fine-tunes and their mixed text


@pytest.mark.long
def test_a_search_from_the_merge_pages_recipe_ends_with_the_best_on_the_merge_and_try_pages(make_window, qtbot, planted,
                                                                                          tmp_path, chart_shots):
    window = make_window()
    window.merge.apply_document({
        "merge_method": "task_arithmetic", "base_model": str(planted.base), "dtype": "float32",
        "models": [{"model": str(planted.animals), "parameters": {"weight": 0.5}},
                   {"model": str(planted.computers), "parameters": {"weight": 0.5}}]})
    window.show_page("lab")
    lab = window.lab
    # The numbers in the form's words: the model's short name and the parameter's label, no recipe key.
    assert [lab.form.parameters.item(row, 1).text() for row in range(lab.form.parameters.rowCount())] == \
        [f"{planted.animals.name}: Weight (now 0.5)", f"{planted.computers.name}: Weight (now 0.5)"]

    lab.start_button.click()
    assert "text file" in lab.status.text()  # nothing runs without a text
    lab.form.text_path.setText(str(planted.mixed_text))
    lab.form.trials.setValue(500)
    lab.form.folder.setText(str(tmp_path / "lab"))
    lab.start_button.click()
    qtbot.waitUntil(lambda: len(lab.chart.trials) >= 3, timeout=120_000)
    lab.cancel_button.click()
    qtbot.waitUntil(lambda: lab.start_button.isEnabled(), timeout=60_000)
    assert "Cancelled" in lab.status.text(), lab.status.text()
    kept = (tmp_path / "lab" / "trials.jsonl").read_text().splitlines()
    assert 3 <= len(kept) < 501

    lab.form.trials.setValue(len(kept) + 4)  # the same folder: the search goes on from the trials kept
    lab.start_button.click()
    qtbot.waitUntil(lambda: lab.start_button.isEnabled(), timeout=180_000)
    assert "Best perplexity" in lab.status.text(), lab.status.text()
    assert sorted(lab.chart.trials) == list(range(len(kept) + 5))
    assert (tmp_path / "lab" / "trials.jsonl").read_text().splitlines()[:len(kept)] == kept
    assert lab.best_table.rowCount() == 5
    best = float(lab.best_table.item(0, 1).text())
    assert all(lab.best_table.item(row, 2).text().startswith(f"{planted.animals.name}: Weight ")
               and "models[" not in lab.best_table.item(row, 2).text() for row in range(5))
    assert best <= lab.chart.trials[0]
    window.grab().save(str(chart_shots / "lab-page.png"))

    lab.use_button.click()
    assert window.stack.currentWidget() is window.merge
    chosen = yaml.safe_load((tmp_path / "lab" / "best.yml").read_text())
    assert [m["parameters"]["weight"] for m in window.merge.document["models"]] == \
        [m["parameters"]["weight"] for m in chosen["models"]]

    window.show_page("lab")
    assert lab.try_button.isEnabled()
    lab.try_button.click()
    window.grab().save(str(chart_shots / "lab-try-merging.png"))
    assert not lab.try_button.isEnabled()  # the two merges run as jobs, listed on the Jobs page
    merges = [r for r in window.state.jobs.records if r.kind == "merge"]
    assert [Path(r.spec["output"]).name for r in merges] == ["start-model", "best-model"]
    qtbot.waitUntil(lambda: window.stack.currentWidget() is window.try_page, timeout=120_000)
    folders = [str(tmp_path / "lab" / "start-model"), str(tmp_path / "lab" / "best-model")]
    assert window.try_page.references() == folders
    merged = [yaml.safe_load((Path(folder) / "mergesmith_recipe.yml").read_text()) for folder in folders]
    assert [m["parameters"]["weight"] for m in merged[1]["models"]] == \
        [m["parameters"]["weight"] for m in chosen["models"]]
    assert [m["parameters"]["weight"] for m in merged[0]["models"]] == [0.5, 0.5]
    window.grab().save(str(chart_shots / "lab-try.png"))

    window.try_page.set_models([])
    window.show_page("lab")
    lab.try_button.click()  # the same two recipes: the folders are reused, nothing is merged again
    assert window.stack.currentWidget() is window.try_page
    assert window.try_page.references() == folders
    assert len([r for r in window.state.jobs.records if r.kind == "merge"]) == 2


def test_a_recipe_with_no_number_to_tune_says_why_and_starts_nothing(make_window, planted, tmp_path):
    window = make_window()
    window.merge.apply_document({"merge_method": "task_arithmetic", "base_model": str(planted.base)})
    window.show_page("lab")
    lab = window.lab
    assert lab.form.parameters.rowCount() == 0
    assert "no number for the lab to tune" in lab.status.text(), lab.status.text()  # said as the page shows

    lab.form.text_path.setText(str(planted.mixed_text))
    lab.form.folder.setText(str(tmp_path / "lab"))
    lab.start_button.click()
    assert "no number to tune" in lab.status.text() and window.state.jobs.records == []
