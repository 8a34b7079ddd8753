"""Model files in and out: reading any model a job names (a folder, a Hub id, a base with an adapter applied on read)
tensor by tensor, and writing a job's output safely (staging, shards, the output rule)."""
