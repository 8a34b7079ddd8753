"""The Mergesmith window: the only package that imports Qt (PySide6) and qasync."""
