"""The Lab page's parts: the form of what to search."""
