"""Text tools that both ingest and query use: the embedder, the temporal parser, token counting."""
