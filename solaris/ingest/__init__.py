"""Ingest: raw rows -> contract-conforming ``events`` (validation rules, dataset readers, the synthetic generator)."""
