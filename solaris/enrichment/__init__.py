"""Enrichment: pair embeddings -> user aggregates (tier 2), user neighbours (KNN) and imputed users (tier 3)."""
