"""Enrichment: pair embeddings -> user aggregates (tier 3), user neighbours (KNN) and imputed users (tier 4)."""
