"""Packaging: one import namespace, ``solaris``.

``jobs/`` and ``udfs/`` live at the top of the repo (one spark-submit entry file per stage, easy to
find) but are shipped *inside* the namespace as ``solaris.jobs`` and ``solaris.udfs`` so that
site-packages never gets generic top-level ``jobs``/``udfs`` packages. Likewise the default config
``conf/solaris.yaml`` and the SQL files ``sql/*.sql`` ship as package data of ``solaris.conf`` and
``solaris.queries`` (``solaris.storage.sql`` is the module that renders them) and are read with
``importlib.resources``, so a wheel installed in a cluster image needs no checkout.
"""

from pathlib import Path

from setuptools import setup

HERE = Path(__file__).parent


def _pins(section: str) -> list[str]:
    """Read pinned requirements from requirements.txt, split by its '# <section>' comments."""
    groups: dict[str, list[str]] = {"core": []}
    current = "core"
    for line in (HERE / "requirements.txt").read_text().splitlines():
        line = line.strip()
        if line.startswith("# [") and line.endswith("]"):
            current = line[3:-1]
            groups.setdefault(current, [])
        elif line and not line.startswith("#"):
            groups[current].append(line)
    return groups.get(section, [])


setup(
    name="solaris-pipeline",
    version="0.1.0",
    description="SOLARIS: speculative precompute of foundation-model embeddings for real-time recommenders",
    python_requires=">=3.11",
    packages=[
        "solaris",
        "solaris.ingest",
        "solaris.precompute",
        "solaris.enrichment",
        "solaris.serving",
        "solaris.evaluation",
        "solaris.models",
        "solaris.storage",
        "solaris.stages",
        "solaris.drivers",
        "solaris.jobs",
        "solaris.udfs",
        "solaris.conf",
        "solaris.queries",
    ],
    package_dir={
        "solaris": "solaris",
        "solaris.jobs": "jobs",
        "solaris.udfs": "udfs",
        "solaris.conf": "conf",
        "solaris.queries": "sql",
    },
    package_data={"solaris": ["py.typed"], "solaris.conf": ["*.yaml"], "solaris.queries": ["*.sql"]},
    install_requires=_pins("core"),
    extras_require={
        "airflow": _pins("airflow"),
        "test": _pins("test"),
    },
    entry_points={"console_scripts": ["solaris=solaris.cli:main"]},
)
