"""The Try page's parts: the models to compare, the Generate tab and the Perplexity tab."""
