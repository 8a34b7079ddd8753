"""The `mergesmith` command line: one module per group of commands (merge, lora, tryout, hub, system), the
terminal's progress and explanations, and the process plumbing they share."""
