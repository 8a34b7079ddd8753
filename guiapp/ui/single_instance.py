"""One window per user: starting Mergesmith again brings the open window to the front instead of opening a
second one beside it (two windows would run two job queues over the same history and output folders).

The first start listens on a local socket named after the user's config folder; a later start that reaches it
asks it to show itself and ends. A socket left behind by a crashed start answers nobody and is replaced.
"""

from __future__ import annotations

import hashlib

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket
from PySide6.QtWidgets import QWidget

from guiapp.system.paths import config_dir

CONNECT_TIMEOUT_MS = 500
SHOW = b"show\n"


def instance_name() -> str:
    """The socket's name: one per config folder, so separate profiles (and test runs) do not meet."""
    return "mergesmith-" + hashlib.sha256(str(config_dir()).encode()).hexdigest()[:16]


def ask_running_instance_to_show() -> bool:
    """True when another Mergesmith of this user is running and was asked to bring its window to the front."""
    socket = QLocalSocket()
    socket.connectToServer(instance_name())
    if not socket.waitForConnected(CONNECT_TIMEOUT_MS):
        return False
    socket.write(SHOW)
    socket.waitForBytesWritten(CONNECT_TIMEOUT_MS)
    socket.disconnectFromServer()
    return True


class SingleInstance(QObject):
    """Listens for later starts and brings `window` to the front for each (`activated` then)."""

    activated = Signal()

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self.window = window
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)  # this user's starts only
        QLocalServer.removeServer(instance_name())  # a socket left by a start that crashed
        self.server.listen(instance_name())
        self.server.newConnection.connect(self._connected)

    def _connected(self) -> None:
        while (socket := self.server.nextPendingConnection()) is not None:
            socket.readyRead.connect(lambda s=socket: self._read(s))
            socket.disconnected.connect(socket.deleteLater)

    def _read(self, socket: QLocalSocket) -> None:
        if bytes(socket.readAll()).startswith(SHOW.strip()):
            self.window.showNormal() if self.window.isMinimized() else self.window.show()
            self.window.raise_()
            self.window.activateWindow()
            self.activated.emit()
