"""Render the set-based SQL files in ``sql/`` with typed parameters (pure, no Spark import).

The files are package data of ``solaris.queries`` (``sql/`` in the checkout, ``solaris/queries/`` in
an installed wheel), read with :mod:`importlib.resources`, so jobs find them wherever they run.

The SQL lives in files so it can be read and reviewed as SQL; this module only substitutes
``{name}`` placeholders, and only with values it can render safely: numbers (floats as DOUBLE
literals), booleans and UTC timestamps (as ``TIMESTAMP '...'`` literals). Table inputs are Spark
temp views named in the SQL.
"""

from __future__ import annotations

import re
import string
from datetime import datetime, timezone
from importlib.resources import files
from importlib.resources.abc import Traversable

SQL_PACKAGE = "solaris.queries"
SQL_DIR: Traversable = files(SQL_PACKAGE)  # supports ``/`` and ``read_text()`` like a Path
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def literal(value: object) -> str:
    """A SQL literal for a safe Python value; anything else is refused."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("non-finite float cannot be a SQL literal")
        return f"{value!r}D"  # a DOUBLE literal: without the suffix Spark reads 0.5 as a DECIMAL
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return f"TIMESTAMP '{value:%Y-%m-%d %H:%M:%S.%f}'"
    raise TypeError(f"refusing to render {type(value).__name__} {value!r} into SQL")


def sql_path(name: str) -> Traversable:
    if not _IDENTIFIER.match(name):
        raise ValueError(f"bad SQL file name {name!r}")
    return SQL_DIR / f"{name}.sql"


def render(name: str, **params: object) -> str:
    """Read ``sql/<name>.sql`` and substitute every ``{placeholder}``; missing/extra params fail."""
    text = sql_path(name).read_text()
    wanted = {field for _, field, _, _ in string.Formatter().parse(text) if field}
    missing, extra = wanted - params.keys(), params.keys() - wanted
    if missing or extra:
        raise ValueError(f"sql/{name}.sql: missing params {sorted(missing)}, unexpected {sorted(extra)}")
    return text.format(**{key: literal(value) for key, value in params.items()})


def statements(sql: str) -> list[str]:
    """Split a rendered file into statements on ';' at line ends, dropping full-line comments."""
    code = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    return [part.strip() for part in re.split(r";\s*(?:\n|$)", code) if part.strip()]
