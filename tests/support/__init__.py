"""Test helpers shared by every test area (the local Hub server and its pytest fixtures)."""
