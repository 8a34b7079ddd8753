"""Running models to try them: generation, perplexity and the checks made before a model is built."""
