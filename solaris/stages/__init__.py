"""The executors of the pipeline's stages, one module each: the stage's Spark work over its tables and
its one typed entry ``run(step: StepContext, *, options: <Name>Options) -> <Name>Result``
(docs/architecture.md §5), with the pure rules it applies imported from the domain packages (ingest, models,
precompute, enrichment, serving). ``jobs/<stage>.py`` is each one's command-line entry and
``solaris.pipeline`` chains the hourly ones. Imports that load torch, Spark or FAISS stay inside the
functions that need them: the DAG files import the pipeline to build their tasks, and parsing a DAG
must stay light."""
