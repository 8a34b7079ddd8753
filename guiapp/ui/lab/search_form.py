"""The Lab page's "What to search" box: the recipe (the Merge page's, or a file's), the text the merge should be
good at, the recipe's numbers to tune with their ranges, how many trials and where they run, and the lab's folder;
from them, the settings of the lab job."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from guiapp.ui.text import error_text

WHERE = (("This computer", "local"), ("Ray, started on this computer", "ray"), ("A Ray cluster at…", "cluster"))


class SearchForm(QGroupBox):
    """The search as the user sets it up: `document` (the recipe mapping searched) and its `tunables` (the numbers
    it has to tune, listed in `parameters` with their ranges), the text, the trials and where they run."""

    problem = Signal(str)  # why a recipe chosen cannot be searched, for the page's status line

    def __init__(self, merge_recipe: Callable[[], dict[str, Any]], parent: QWidget | None = None) -> None:
        """`merge_recipe` gives the Merge page's recipe as it stands."""
        super().__init__("What to search", parent)
        self._merge_recipe = merge_recipe
        self.document: dict[str, Any] | None = None
        self.tunables: list[Any] = []
        form = QFormLayout(self)
        self.recipe_source = QComboBox(accessibleName="Recipe")
        self.recipe_source.addItem("The Merge page's recipe")
        self.recipe_source.addItem("A recipe file…")
        self.recipe_source.activated.connect(self._recipe_chosen)
        self.recipe_label = QLabel("")
        recipe_row = QHBoxLayout()
        recipe_row.addWidget(self.recipe_source)
        recipe_row.addWidget(self.recipe_label, 1)
        form.addRow("Recipe", recipe_row)
        self.text_path = QLineEdit(placeholderText="A .txt file of the kind of text the merge should be good at",
                                   accessibleName="Text file")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse_text)
        text_row = QHBoxLayout()
        text_row.addWidget(self.text_path, 1)
        text_row.addWidget(browse)
        form.addRow("Text", text_row)
        self.parameters = QTableWidget(0, 4, accessibleName="Numbers to tune")
        self.parameters.setHorizontalHeaderLabels(["Tune", "Number", "From", "To"])
        self.parameters.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.parameters.verticalHeader().hide()
        self.parameters.setMaximumHeight(110)
        form.addRow("Numbers", self.parameters)
        self.trials = QSpinBox(minimum=1, maximum=1000, value=20, accessibleName="Trials")
        self.trials.setMaximumWidth(90)
        self.where = QComboBox(accessibleName="Where to run")
        for label, _ in WHERE:
            self.where.addItem(label)
        self.address = QLineEdit(placeholderText="HOST:6379", accessibleName="Ray address")
        self.address.setVisible(False)
        self.where.currentIndexChanged.connect(lambda i: self.address.setVisible(WHERE[i][1] == "cluster"))
        run_row = QHBoxLayout()
        run_row.addWidget(self.trials)
        run_row.addWidget(QLabel("trials, on"))
        run_row.addWidget(self.where)
        run_row.addWidget(self.address, 1)
        run_row.addStretch(1)
        form.addRow("Trials", run_row)
        self.folder = QLineEdit(str(Path.home() / "Mergesmith lab" / time.strftime("%Y-%m-%d %H%M")),
                                accessibleName="Lab folder")
        form.addRow("Folder", self.folder)

    def follows_merge_page(self) -> bool:
        """Whether the recipe searched is the Merge page's (not a file's)."""
        return self.recipe_source.currentIndex() == 0

    def use_merge_recipe(self) -> None:
        """Search the Merge page's recipe as it stands now."""
        self.set_document(self._merge_recipe(), "from the Merge page")

    def set_document(self, document: dict[str, Any], where: str) -> None:
        """Search `document` (a recipe mapping): list its numbers with their ranges, or say why there are none."""
        from guiapp.errors import MergesmithError
        from guiapp.jobs.lab import lab_tunables, tunable_words

        self.document = document
        try:
            self.tunables = lab_tunables(document)
        except MergesmithError as error:
            self.tunables = []
            self.problem.emit(error_text(error))
        self.recipe_label.setText(f"{document.get('merge_method') or 'no method yet'}, {where}")
        self.parameters.setRowCount(len(self.tunables))
        for row, tunable in enumerate(self.tunables):
            check = QTableWidgetItem()
            check.setCheckState(Qt.CheckState.Checked)
            self.parameters.setItem(row, 0, check)
            cell = read_only_cell(f"{tunable_words(document, tunable)} (now {tunable.start:g})")
            cell.setToolTip(f"In the recipe: {tunable.name}")
            self.parameters.setItem(row, 1, cell)
            self.parameters.setItem(row, 2, QTableWidgetItem(f"{tunable.low:g}"))
            self.parameters.setItem(row, 3, QTableWidgetItem(f"{tunable.high:g}"))

    def _recipe_chosen(self, index: int) -> None:
        if index == 0:
            self.use_merge_recipe()
            return
        name, _ = QFileDialog.getOpenFileName(self, "Recipe to search", "", "Recipes (*.yml *.yaml)")
        if name:
            from guiapp.errors import MergesmithError
            from guiapp.jobs.lab import recipe_document

            try:
                self.set_document(recipe_document(Path(name)), Path(name).name)
            except MergesmithError as error:
                self.problem.emit(error_text(error))

    def _browse_text(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Text to score merges on", "", "Text (*.txt *.jsonl)")
        if name:
            self.text_path.setText(name)

    def tune(self) -> str:
        """The --tune text of the rows checked, each with the range its row shows."""
        chosen = []
        for row, tunable in enumerate(self.tunables):
            if self.parameters.item(row, 0).checkState() == Qt.CheckState.Checked:
                chosen.append(f"{tunable.name}={self.parameters.item(row, 2).text()}:"
                              f"{self.parameters.item(row, 3).text()}")
        return ",".join(chosen)

    def lab_folder(self) -> Path:
        """The folder the search runs in, as typed (`~` expanded)."""
        return Path(self.folder.text().strip()).expanduser()

    def spec(self, recipe: Path, tune: str) -> dict[str, Any]:
        """The lab job's settings: search the recipe written to `recipe` over the numbers `tune` names."""
        engine = WHERE[self.where.currentIndex()][1]
        return {"recipe": str(recipe), "text": self.text_path.text().strip(), "trials": self.trials.value(),
                "output": str(self.lab_folder()), "tune": tune, "engine": "local" if engine == "local" else "ray",
                "ray_address": self.address.text().strip() or None if engine == "cluster" else None}


def read_only_cell(text: str) -> QTableWidgetItem:
    """A table cell showing `text` that the user cannot edit."""
    item = QTableWidgetItem(text)
    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
    return item
