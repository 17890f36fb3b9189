"""Evaluation: what is compared and how it is summarised and reported (no Spark, no torch)."""
