"""Precompute: events -> speculated candidates -> FM-scored, verified pair embeddings."""
