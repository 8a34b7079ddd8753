"""The Try page's Generate tab: a prompt, how to decode, and one column per model as its text streams in."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from guiapp.jobs.recipe_fixes import short_name
from guiapp.jobs.tryout import DEFAULT_TEMPERATURE, DEFAULT_TOP_P
from guiapp.ui.text import sentence
from guiapp.ui.widgets.wrapping_label import WrappingLabel


class ModelColumn(QGroupBox):
    """One model's output: its name, what it runs in, and the text as it streams in."""

    def __init__(self, reference: str, parent: QWidget | None = None) -> None:
        super().__init__(short_name(reference), parent)
        self.setToolTip(reference)
        self.status = WrappingLabel("Waiting…")
        self.output = QPlainTextEdit(readOnly=True)
        self.output.setAccessibleName(f"Output of {reference}")
        layout = QVBoxLayout(self)
        layout.addWidget(self.status)
        layout.addWidget(self.output, 1)

    def append(self, text: str) -> None:
        cursor = self.output.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        cursor.insertText(text)
        self.output.setTextCursor(cursor)

    def text(self) -> str:
        return self.output.toPlainText()


class GenerateTab(QWidget):
    """The prompt and the decoding settings above the models' columns; Generate is the page's to connect."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.columns: list[ModelColumn] = []
        column = QVBoxLayout(self)
        self.prompt = QPlainTextEdit(placeholderText="Write a prompt; each model answers it in its own column.")
        self.prompt.setMaximumHeight(90)
        column.addWidget(self.prompt)
        row = QHBoxLayout()
        self.decoding = QComboBox()
        self.decoding.addItem("Greedy (the likeliest token)", False)
        self.decoding.addItem("Sampled", True)
        self.seed = QSpinBox(minimum=0, maximum=2**31 - 1, value=0, prefix="Seed ")
        self.temperature = QDoubleSpinBox(minimum=0.05, maximum=2.0, singleStep=0.05, decimals=2,
                                          value=DEFAULT_TEMPERATURE, prefix="Temperature ")
        self.top_p = QDoubleSpinBox(minimum=0.05, maximum=1.0, singleStep=0.05, decimals=2, value=DEFAULT_TOP_P,
                                    prefix="Top-p ")
        self.decoding.currentIndexChanged.connect(self._decoding_changed)
        self._decoding_changed()
        self.max_new_tokens = QSpinBox(minimum=1, maximum=8192, value=128, suffix=" new tokens at most")
        self.generate_button = QPushButton("Generate")
        for widget in (self.decoding, self.seed, self.temperature, self.top_p, self.max_new_tokens):
            row.addWidget(widget)
        row.addStretch(1)
        self.generate_estimate = QLabel("", accessibleName="Generate estimate")
        row.addWidget(self.generate_estimate)
        row.addWidget(self.generate_button)
        column.addLayout(row)
        self.columns_area = QHBoxLayout()
        column.addLayout(self.columns_area, 1)

    def sampling(self) -> dict[str, Any]:
        """The decoding settings as the Try job takes them (`try_job`'s keyword arguments)."""
        return {"max_new_tokens": self.max_new_tokens.value(), "sample": bool(self.decoding.currentData()),
                "seed": self.seed.value(), "temperature": self.temperature.value(), "top_p": self.top_p.value()}

    def show_columns(self, references: list[str]) -> None:
        """One empty column per model, in place of the last run's."""
        for column in self.columns:
            self.columns_area.removeWidget(column)
            column.deleteLater()
        self.columns = [ModelColumn(reference) for reference in references]
        for column in self.columns:
            self.columns_area.addWidget(column, 1)

    def append_text(self, index: int, text: str) -> None:
        """Add the text model `index` just decoded to its column (ignored when that column is gone)."""
        if index < len(self.columns):
            self.columns[index].status.setText("Generating…")
            self.columns[index].append(text)

    def show_generations(self, generations: list[dict[str, Any]]) -> None:
        """Under each model's name: how many tokens it wrote, in what dtype, and why a sample model writes noise."""
        for column, generation in zip(self.columns, generations):
            empty = "" if generation["text"].strip() else " (only special tokens: nothing to show)"
            untrained = f" — {sentence(generation['untrained'])}." if generation.get("untrained") else ""
            column.status.setText(f"{len(generation['tokens'])} tokens, ran in {generation['dtype']}{empty}"
                                  f"{untrained}")

    def _decoding_changed(self) -> None:
        """Seed, temperature and top-p matter only when sampling: disabled, with the reason, for greedy."""
        sampled = bool(self.decoding.currentData())
        why = "" if sampled else " (used only when Sampled is chosen)"
        tips = ((self.seed, "Starts the random draws: the same seed gives the same text"),
                (self.temperature, "Lower picks likelier words, higher more varied ones"),
                (self.top_p, "Draw only from the likeliest words that together make up this share of the chances"))
        for widget, tip in tips:
            widget.setEnabled(sampled)
            widget.setToolTip(tip + why + ".")
