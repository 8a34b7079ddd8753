"""How a sampled generation picks its tokens unless the user says otherwise. Torch-free, so that the window shows
the same defaults the engine uses without loading the engine."""

# Softens the distribution a little (1.0 leaves it as the model made it; lower is more predictable).
DEFAULT_TEMPERATURE = 0.7
# Draw only from the likeliest tokens that together hold this much probability (nucleus sampling).
DEFAULT_TOP_P = 0.9
# What to do with a prompt longer than the model reads: keep its end and say so, or refuse it.
TRUNCATE, REFUSE = "truncate", "refuse"
LONG_PROMPT_CHOICES = (TRUNCATE, REFUSE)
