"""Capability packages for reading and writing checkpoints."""
