"""The merge lab: searches a recipe's numbers for the merge with the lowest perplexity on the user's text."""
