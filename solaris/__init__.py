"""SOLARIS: speculative offloading of latent-based representations for inference scaling."""

__version__ = "0.1.0"
