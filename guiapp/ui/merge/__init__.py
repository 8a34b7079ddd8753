"""The Merge page's parts: the models table, the recipe YAML panel and the message labels it shares."""
