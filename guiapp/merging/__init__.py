"""Merging models: recipes, the plan, the merge loop, the 20 methods, slices, modules, tokenizers and chat templates."""
