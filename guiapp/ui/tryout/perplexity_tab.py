"""The Try page's Perplexity tab: the text to score, then each model's score in a table and as bars."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from guiapp.jobs.recipe_fixes import short_name
from guiapp.ui.text import sentence
from guiapp.ui.theme import set_status_style
from guiapp.ui.widgets.wrapping_label import WrappingLabel


class BarChart(QWidget):
    """Horizontal bars, one per model, labelled with the value: drawn with QPainter (no chart library)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.values: list[tuple[str, float]] = []
        self.caption = ""
        self.setMinimumHeight(120)

    def set_values(self, values: list[tuple[str, float]], caption: str) -> None:
        self.values, self.caption = values, caption
        self.setMinimumHeight(40 + 34 * len(values))
        self.update()

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        painter.setPen(palette.color(QPalette.ColorRole.WindowText))
        metrics = painter.fontMetrics()
        painter.drawText(QRectF(0, 0, self.width(), 22), Qt.AlignmentFlag.AlignLeft, self.caption)
        if not self.values:
            return
        label_width = min(self.width() // 3, max(metrics.horizontalAdvance(label) for label, _ in self.values) + 16)
        value_width = metrics.horizontalAdvance("00000.000") + 12
        bar_space = max(10, self.width() - label_width - value_width)
        largest = max(value for _, value in self.values) or 1.0
        bar_colour = palette.color(QPalette.ColorRole.Highlight)
        for row, (label, value) in enumerate(self.values):
            top = 28 + row * 34
            shown = metrics.elidedText(label, Qt.TextElideMode.ElideLeft, label_width - 8)
            painter.drawText(QRectF(0, top, label_width - 8, 24), Qt.AlignmentFlag.AlignRight
                             | Qt.AlignmentFlag.AlignVCenter, shown)
            width = max(2.0, bar_space * value / largest)
            painter.fillRect(QRectF(label_width, top + 2, width, 20), QColor(bar_colour))
            painter.drawText(QRectF(label_width + width + 6, top, value_width, 24), Qt.AlignmentFlag.AlignVCenter,
                             f"{value:.3f}")
        painter.end()


class PerplexityTab(QWidget):
    """The text to score and the window size above the results; Compute is the page's to connect, and a text
    file the user picks is announced (`file_chosen`) for the page to read."""

    file_chosen = Signal(Path)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.scored: list[str] = []  # the models the results are about
        column = QVBoxLayout(self)
        self.text = QPlainTextEdit(placeholderText="Paste text to score, or open a .txt or .jsonl file. Encoders "
                                   "(BERT-like) are compared on sentence pairs instead: one pair per line, "
                                   "separated by a tab.")
        self.text.setMaximumHeight(110)
        column.addWidget(self.text)
        row = QHBoxLayout()
        self.open_text = QPushButton("Open file…")
        self.open_text.clicked.connect(self._choose_text_file)
        self.window_tokens = QSpinBox(minimum=16, maximum=32768, value=512, suffix=" tokens per window")
        self.perplexity_button = QPushButton("Compute")
        row.addWidget(self.open_text)
        row.addWidget(self.window_tokens)
        row.addStretch(1)
        self.perplexity_estimate = QLabel("", accessibleName="Perplexity estimate")
        row.addWidget(self.perplexity_estimate)
        row.addWidget(self.perplexity_button)
        column.addLayout(row)
        self.table = QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["Model", "Perplexity", "Tokens", "Ran in"])
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.chart = BarChart()
        # Why a sample model scores about its vocabulary size, next to the score.
        self.perplexity_note = WrappingLabel(visible=False)
        set_status_style(self.perplexity_note, "warning")
        column.addWidget(self.table)
        column.addWidget(self.perplexity_note)
        column.addWidget(self.chart)
        column.addStretch(1)
        self._fit_table()

    def clear_results(self) -> None:
        """Empty the table and the chart (a new run starts, or the models changed)."""
        self.table.setRowCount(0)
        self._fit_table()
        self.chart.set_values([], "")

    def keep_results_for(self, references: list[str]) -> None:
        """Results about other models than `references` go: a table of stale scores would mislead."""
        if self.scored and self.scored != references:
            self.scored = []
            self.clear_results()

    def show_results(self, results: list[dict[str, Any]]) -> None:
        """Each model's perplexity (or, for encoders, mean similarity) in the table and as a bar."""
        self.scored = [entry["model"] for entry in results]
        self.table.setRowCount(len(results))
        bars = []
        for row, entry in enumerate(results):
            if entry["perplexity"] is not None:
                value, count = entry["perplexity"], str(entry["tokens"])
            else:
                value, count = entry["mean_similarity"], f"{len(entry['similarities'])} pairs (similarity)"
            for column, text in enumerate((entry["model"], f"{value:.3f}", count, entry["dtype"])):
                item = QTableWidgetItem(text)
                if entry.get("untrained"):
                    item.setToolTip(sentence(entry["untrained"]) + ".")
                self.table.setItem(row, column, item)
            bars.append((short_name(entry["model"]), value))
        notes = [f"{short_name(entry['model'])} is {entry['untrained']}." for entry in results
                 if entry.get("untrained")]
        self.perplexity_note.setText("\n".join(notes))
        self.perplexity_note.setVisible(bool(notes))
        self._fit_table()
        causal = all(entry["perplexity"] is not None for entry in results)
        self.chart.set_values(bars, "Perplexity (lower is better)" if causal else
                              "Perplexity, or mean cosine similarity for encoders")

    def _fit_table(self) -> None:
        """The table as tall as its rows (the chart goes right under it, not below empty space)."""
        rows = sum(self.table.rowHeight(row) for row in range(self.table.rowCount()))
        self.table.setFixedHeight(self.table.horizontalHeader().height() + rows + 4)

    def _choose_text_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Text to score", "", "Text (*.txt *.jsonl);;All files (*)")
        if path:
            self.file_chosen.emit(Path(path))
