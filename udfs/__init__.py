"""Arrow/pandas UDFs run on Spark executors (installed as ``solaris.udfs``)."""
