"""The Experts page: several fine-tunes of one base become the experts of one mixture-of-experts model.

The form is a mergekit-moe configuration in plain words: the base, each expert with the prompts it is good at
(and, optionally, the ones it is not), how tokens are routed, how many experts each token uses, the output folder.
The configuration is checked from the models' headers on a worker thread (debounced) as the job checks it — experts
that do not fit the base, the output folder, the estimate — and the action bar says why Run waits. Run submits the
same job `mergesmith moe` runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from guiapp.errors import MergesmithError
from guiapp.jobs.moe_check import check_experts
from guiapp.system.paths import expanded
from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.merge.output_box import default_output_folder
from guiapp.ui.text import error_text
from guiapp.ui.widgets.action_bar import ActionBar
from guiapp.ui.widgets.model_picker import ModelPicker
from guiapp.ui.widgets.options import OptionCombo, device_choices
from guiapp.ui.widgets.wrapping_label import WrappingLabel

# The routing choices, in the words the page shows, and the gate mode each stands for.
ROUTING = (
    ("Route by what each expert is good at (slower, best)", "hidden",
     "Runs the base model on each expert's prompts and routes a token to the experts whose prompts it resembles "
     "most, layer by layer."),
    ("Route by the words in each expert's prompts (fast)", "cheap_embed",
     "Routes a token to the experts whose prompts use words like it. No model is run."),
    ("Route at random (to train the router afterwards)", "random",
     "The router starts random: the model needs training before the experts are used well. Prompts are not needed."),
)
FIRST_EXPERTS = 2


class ExpertBox(QGroupBox):
    """One expert: its model and its prompts (one a line)."""

    changed = Signal()
    remove_requested = Signal(object)

    def __init__(self, number: int, parent: QWidget | None = None) -> None:
        super().__init__(f"Expert {number}", parent)
        form = QFormLayout(self)
        self.model = ModelPicker("A fine-tune of the base: org/name or a folder")
        self.positive = QPlainTextEdit(accessibleName="Good at", placeholderText="One example prompt a line, e.g.\n"
                                       "Write a poem about the sea")
        self.negative = QPlainTextEdit(accessibleName="Not for", placeholderText="Optional: prompts this expert "
                                       "should not get, one a line")
        for box in (self.positive, self.negative):
            box.setFixedHeight(box.fontMetrics().lineSpacing() * 4 + 12)
            box.textChanged.connect(self.changed)
        self.model.changed.connect(lambda _: self.changed.emit())
        self.remove = QPushButton("Remove this expert")
        self.remove.clicked.connect(lambda: self.remove_requested.emit(self))
        form.addRow("Model", self.model)
        form.addRow("Good at", self.positive)
        form.addRow("Not for", self.negative)
        form.addRow("", self.remove)

    def entry(self) -> dict[str, Any]:
        """The expert as mergekit-moe's configuration writes it."""
        entry: dict[str, Any] = {"source_model": self.model.text()}
        for key, box in (("positive_prompts", self.positive), ("negative_prompts", self.negative)):
            prompts = [line.strip() for line in box.toPlainText().splitlines() if line.strip()]
            if prompts:
                entry[key] = prompts
        return entry


class ExpertsPage(QWidget):
    job_submitted = Signal(str)

    def __init__(self, state, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.experts: list[ExpertBox] = []
        self.bar = ActionBar("Assemble experts")
        self.run_button = self.bar.button
        self.run_button.clicked.connect(self.run)
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(self._build_form())
        layout = QVBoxLayout(self)
        layout.addWidget(scroll, 1)
        layout.addWidget(self.bar)
        self._checker = LatestTask(500, self)
        for _ in range(FIRST_EXPERTS):
            self.add_expert()
        self.per_token.setValue(2)  # mergekit-moe's default, allowed once there are two experts
        state.probe_ready.connect(lambda _: self._refresh_devices())
        state.checks_outdated.connect(self.recheck)
        self.base.use_library(state.library)
        self._refresh_devices()
        self._restore_form()  # once the pickers use the library, which would clear them
        self.recheck()

    def _build_form(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        column.addWidget(WrappingLabel(
            "Turn several fine-tunes of one base model into one mixture-of-experts model: each layer keeps the "
            "base's attention and gets every fine-tune's feed-forward part as an expert; a router sends each token "
            "to the experts whose example prompts it resembles. The configuration is mergekit-moe's."))
        models = QGroupBox("Base model")
        form = QFormLayout(models)
        self.base = ModelPicker("The model the experts were fine-tuned from")
        self.base.changed.connect(self.recheck)
        form.addRow("Base model", self.base)
        column.addWidget(models)
        self.expert_column = QVBoxLayout()
        column.addLayout(self.expert_column)
        self.add_button = QPushButton("Add an expert")
        self.add_button.clicked.connect(self.add_expert)
        column.addWidget(self.add_button)
        routing = QGroupBox("Routing")
        form = QFormLayout(routing)
        self.routing = QComboBox(accessibleName="Routing")
        for label, mode, tip in ROUTING:
            self.routing.addItem(label, mode)
            self.routing.setItemData(self.routing.count() - 1, tip, 3)  # 3: Qt.ToolTipRole
        self.routing.currentIndexChanged.connect(self._routing_changed)
        self.routing_words = WrappingLabel(ROUTING[0][2])
        self.per_token = QSpinBox(accessibleName="Experts per token", minimum=1, maximum=FIRST_EXPERTS, value=2)
        self.per_token.valueChanged.connect(self.recheck)
        self.device = OptionCombo()
        self.device.setAccessibleName("Device")
        self.device.choice_changed.connect(lambda _: self.recheck())
        form.addRow("How tokens are routed", self.routing)
        form.addRow("", self.routing_words)
        form.addRow("Experts per token", self.per_token)
        form.addRow("Device for the routing", self.device)
        column.addWidget(routing)
        output = QGroupBox("Output")
        form = QFormLayout(output)
        self.out = QLineEdit(str(default_output_folder() / "experts-moe"))
        self.out.textChanged.connect(self.recheck)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QWidget()
        line = QHBoxLayout(row)
        line.setContentsMargins(0, 0, 0, 0)
        line.addWidget(self.out, 1)
        line.addWidget(browse)
        form.addRow("Model folder", row)
        self.overwrite = QCheckBox("Replace the folder if it already exists")
        self.overwrite.toggled.connect(self.recheck)
        form.addRow("", self.overwrite)
        column.addWidget(output)
        column.addStretch()
        return page

    def add_expert(self) -> ExpertBox:
        box = ExpertBox(len(self.experts) + 1)
        box.model.use_library(self.state.library)
        box.changed.connect(self.recheck)
        box.remove_requested.connect(self._remove_expert)
        self.experts.append(box)
        self.expert_column.addWidget(box)
        self._renumber()
        return box

    def _remove_expert(self, box: ExpertBox) -> None:
        self.experts.remove(box)
        box.setParent(None)
        box.deleteLater()
        self._renumber()

    def _renumber(self) -> None:
        for number, box in enumerate(self.experts, start=1):
            box.setTitle(f"Expert {number}")
            box.remove.setEnabled(len(self.experts) > 1)
        self.per_token.setMaximum(max(1, len(self.experts)))
        self.recheck()

    def _routing_changed(self) -> None:
        self.routing_words.setText(ROUTING[self.routing.currentIndex()][2])
        self.recheck()

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Where to write it", str(default_output_folder()))
        if folder:
            self.out.setText(str(Path(folder) / "experts-moe"))

    def _refresh_devices(self) -> None:
        self.device.set_choices(device_choices(self.state.probe, "try"))

    def document(self) -> dict[str, Any]:
        """The form as a mergekit-moe configuration."""
        return {"base_model": self.base.text(), "gate_mode": self.routing.currentData(),
                "experts_per_token": self.per_token.value(), "experts": [box.entry() for box in self.experts]}

    def _missing(self) -> str | None:
        if not self.base.text():
            return "Choose the base model."
        if not all(box.model.text() for box in self.experts):
            return "Choose a model for every expert."
        if self.routing.currentData() != "random" and not all(box.entry().get("positive_prompts")
                                                               for box in self.experts):
            return "Give every expert a prompt or two it is good at."
        if not self.out.text().strip():
            return "Choose the output folder."
        return None

    def recheck(self, *_: Any) -> None:
        """Check the form again (after a pause in the typing): the bar waits, is blocked or is ready."""
        missing = self._missing()
        if missing:
            self._checker.cancel()
            self.bar.set_summary("")
            self.bar.set_waiting(missing)
            return
        self.bar.set_checking()
        document, out = self.document(), expanded(self.out.text().strip())
        device, overwrite, probe = self.device.value() or "cpu", self.overwrite.isChecked(), self.state.probe
        self._checker.request(lambda: self._check(document, device, out, overwrite, probe))

    async def _check(self, document: dict, device: str, out: Path, overwrite: bool, probe: Any) -> None:
        try:
            summary = await run_blocking(check_experts, document, device, out, overwrite, probe)
        except MergesmithError as error:
            self.bar.set_summary("")
            self.bar.set_blocked(error_text(error))
            return
        self.bar.set_summary(summary)
        self.bar.set_ready()

    def run(self) -> str | None:
        """Submit the assembly (the button is enabled only once the check passed)."""
        from guiapp.jobs.specs import moe_job

        if self._missing():
            return None
        job = moe_job(None, expanded(self.out.text().strip()), document=self.document(),
                      device=self.device.value() or "cpu", overwrite=self.overwrite.isChecked())
        record = self.state.jobs.submit(job)
        self.job_submitted.emit(record.key)
        return record.key

    def save_form(self) -> None:
        """Keep the form for the next start (never the Replace choice, which is made each time)."""
        from guiapp.jobs.form_memory import remember_form

        remember_form("experts", {**self.document(), "out": self.out.text()})

    def _restore_form(self) -> None:
        from guiapp.jobs.form_memory import remembered_form

        form = remembered_form("experts")
        entries = [e for e in form.get("experts") or [] if isinstance(e, dict)]
        while len(self.experts) < len(entries):
            self.add_expert()
        for box, entry in zip(self.experts, entries, strict=False):
            box.model.set_text(str(entry.get("source_model") or ""))
            for key, text_box in (("positive_prompts", box.positive), ("negative_prompts", box.negative)):
                prompts = entry.get(key)
                if isinstance(prompts, list):
                    text_box.setPlainText("\n".join(str(p) for p in prompts))
        if isinstance(form.get("base_model"), str):
            self.base.set_text(form["base_model"])
        if (index := self.routing.findData(form.get("gate_mode"))) >= 0:
            self.routing.setCurrentIndex(index)
        if isinstance(form.get("experts_per_token"), int):
            self.per_token.setValue(form["experts_per_token"])
        if isinstance(form.get("out"), str) and form["out"]:
            self.out.setText(form["out"])

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        self.recheck()
