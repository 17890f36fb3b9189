"""Where model checkpoints live under the warehouse, by role (pure path logic)."""

from __future__ import annotations

from pathlib import Path

from solaris.config import SolarisConfig

MODELS_DIR = "models"


def model_root(config: SolarisConfig, role: str) -> Path:
    """``<warehouse>/models/<role>``: ``fm``, ``vm_baseline`` (the verifier), ``vm_distilled``..."""
    if not role.replace("_", "").isalnum():
        raise ValueError(f"bad model role {role!r}")
    return config.warehouse / MODELS_DIR / role
