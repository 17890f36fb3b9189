"""spark-submit entry points, one per pipeline stage (installed as ``solaris.jobs``)."""
