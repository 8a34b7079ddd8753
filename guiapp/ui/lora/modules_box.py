"""The Extract tab's Modules box: what becomes of the embeddings and the output head, and, behind "Advanced", which
modules are extracted: the kinds of the base model's modules listed to tick (listed from its headers on a worker
thread), or regular expressions to include and leave out."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QToolButton,
    QWidget,
)

from guiapp.system.units import plural
from guiapp.ui.background import LatestTask, run_blocking
from guiapp.ui.text import error_text
from guiapp.ui.widgets.wrapping_label import WrappingLabel

# What the module line says until the base model is chosen.
MODULES_HINT = "Choose the base model to list its modules. With none ticked, every changed module is extracted."


class ModulesBox(QGroupBox):
    """The embeddings policy (`embeddings`) and the modules to extract (`include`, `exclude`: patterns, empty for
    all); ticking kinds in `module_list` writes the include pattern."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Modules", parent)
        form = QFormLayout(self)
        self.embeddings = QComboBox(accessibleName="Embeddings")
        self.embeddings.addItem("Save them whole (safest)", "save")
        self.embeddings.addItem("Decompose them too (smaller)", "lora")
        self.embeddings.addItem("Leave them out (reported)", "skip")
        form.addRow("Embeddings and output head", self.embeddings)
        self.modules_toggle = QToolButton(text="Advanced: choose which modules", checkable=True,
                                          arrowType=Qt.ArrowType.RightArrow)
        self.modules_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.modules_toggle.toggled.connect(self._show_module_choice)
        form.addRow(self.modules_toggle)
        self.modules_advanced = QWidget(visible=False)
        advanced = QFormLayout(self.modules_advanced)
        advanced.setContentsMargins(0, 0, 0, 0)
        self.module_list = QListWidget(accessibleName="Module kinds")
        self.module_list.setMaximumHeight(150)
        self.module_list.itemChanged.connect(lambda _: self._module_kinds_chosen())
        self.module_status = WrappingLabel(MODULES_HINT)
        self.include = QLineEdit(placeholderText="all modules (a regular expression, e.g. self_attn)")
        self.exclude = QLineEdit(placeholderText="none (a regular expression, e.g. lm_head)")
        advanced.addRow("Only these modules", self.module_list)
        advanced.addRow("", self.module_status)
        advanced.addRow("Only modules matching", self.include)
        advanced.addRow("Leave out modules matching", self.exclude)
        form.addRow(self.modules_advanced)
        self._module_lister = LatestTask(300, self)

    def list_modules_of(self, base: str) -> None:
        """List the kinds of the base model's modules (in the background), or, with no base, the hint."""
        if base:
            self._module_lister.request(lambda: self._list_modules(base))
        else:  # the kinds listed were another base's
            self._module_lister.cancel()
            self.module_list.clear()
            self.module_status.setText(MODULES_HINT)

    def show_choice_when_set(self) -> None:
        """Open the module choice when a pattern is set: what narrows the extraction is never hidden."""
        self.modules_toggle.setChecked(bool(self.include.text() or self.exclude.text()))

    def _show_module_choice(self, shown: bool) -> None:
        self.modules_toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.modules_advanced.setVisible(shown)

    async def _list_modules(self, base: str) -> None:
        from guiapp.jobs.library import module_kinds

        try:
            kinds = await run_blocking(module_kinds, base)
        except Exception as error:  # the pair check says what is wrong with the base
            self.module_list.clear()
            self.module_status.setText(f"The base model's modules could not be listed: {error_text(error)}")
            return
        self.module_list.blockSignals(True)
        self.module_list.clear()
        for kind, count in kinds:
            item = QListWidgetItem(f"{kind}  ({plural(count, 'matrix', 'matrices')})")
            item.setData(Qt.ItemDataRole.UserRole, kind)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Unchecked)
            self.module_list.addItem(item)
        self.module_list.blockSignals(False)
        self.module_status.setText("Tick the kinds of modules to extract; with none ticked, every changed module "
                                   "is extracted.")

    def _module_kinds_chosen(self) -> None:
        from guiapp.jobs.library import modules_pattern

        items = (self.module_list.item(row) for row in range(self.module_list.count()))
        self.include.setText(modules_pattern(item.data(Qt.ItemDataRole.UserRole) for item in items
                                             if item.checkState() == Qt.CheckState.Checked))
