"""The executors of the pipeline stages, in data-flow order: each stage's Spark work over its tables, with
the pure rules it applies imported from the domain packages (ingest, models, precompute, enrichment,
serving). ``jobs/<stage>.py`` is each one's command-line entry; ``solaris.pipeline`` chains them."""
