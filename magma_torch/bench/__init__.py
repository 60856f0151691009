"""magma-bench: retrieval and ingest at 10^3..10^6 events on synthetic memories."""
