"""Where and how the engine computes: the torch device a job runs on and the helper threads it may use."""
