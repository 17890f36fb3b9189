"""The built wheel works without the checkout: config, SQL and job entry files are package data.

Builds a wheel from a copy of the sources (no network, no build isolation), installs it into a fresh
venv layered on the already-installed dependencies (a .pth file, as scripts/setup.sh does for
./.venv), then from a folder outside the checkout runs ``solaris ingest`` and ``solaris candidates``
(which renders sql/candidates.sql; both in one process to pay the JVM start once) with the packaged
default config: relative paths (``warehouse``, ``spark.jars_dir``) resolve against the working
directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("setup.py", "requirements.txt", "solaris", "jobs", "udfs", "conf", "sql")
SPARK = ["--set", "spark.master=local[2]", "--set", "spark.shuffle_partitions=2", "--set", "spark.driver_memory=1g"]


def _run(command: list, *, cwd: Path, env: dict, timeout: int = 300) -> str:
    done = subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _dependencies_site() -> Path:
    """site-packages of the shared dependency venv (where pydantic lives; not this checkout's .venv)."""
    import pydantic

    site = Path(pydantic.__file__).resolve().parent.parent
    assert not list(site.glob("__editable__*solaris*")), "dependency venv must not hold this checkout"
    return site


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv with the wheel installed; returns its folder."""
    if not list((ROOT / "jars").glob("delta-spark_*.jar")):
        pytest.skip("Delta JARs missing: run `make setup`")
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    for name in SOURCES:  # build from a copy: an in-tree build would write build/ into the shared checkout
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(source, src / name)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "SOLARIS_CONFIG",
                                                                         "SOLARIS_HOME", "SOLARIS_WAREHOUSE")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", work / "dist", src], cwd=work, env=env)
    wheel = next((work / "dist").glob("solaris_pipeline-*.whl"))

    venv = work / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    _run([base_python, "-m", "venv", "--without-pip", venv], cwd=work, env=env)
    python = venv / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work,
                     env=env).strip())
    (site / "_solaris_deps.pth").write_text(f"import site; site.addsitedir({str(_dependencies_site())!r})\n")
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel], cwd=work, env=env)
    return venv


def test_installed_wheel_runs_ingest_and_candidates_outside_the_checkout(installed, tmp_path):
    python, cli = installed / "bin" / "python", installed / "bin" / "solaris"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert ROOT not in run_dir.resolve().parents
    (run_dir / "jars").symlink_to(ROOT / "jars")  # the Delta JARs are not package data: the image provides them
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "SOLARIS_CONFIG",
                                                                         "SOLARIS_HOME", "SOLARIS_WAREHOUSE")}
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python), TZ="UTC")

    # every resource comes from the installed package, none from the checkout
    probe = _run([python, "-c", (
        "import solaris, solaris.storage.sql as s, solaris.config as c, solaris.orchestration as o\n"
        "print(solaris.__file__); print(s.sql_path('candidates')); print(c.default_config_file())\n"
        "print(o.job_application('candidates')); cfg = c.load_config()\n"
        "print(cfg.warehouse); print(cfg.spark.jars_dir)")],
        cwd=run_dir, env=env).split()
    package = Path(probe[0]).parent
    assert installed in package.parents and ROOT not in package.parents
    assert probe[1:4] == [str(package / "queries" / "candidates.sql"), str(package / "conf" / "solaris.yaml"),
                          str(package / "jobs" / "candidates.py")]
    # relative paths resolve against the working directory (jars/ is a symlink, resolved to its target)
    assert probe[4:] == [str(run_dir / "warehouse"), str((run_dir / "jars").resolve())]

    events = run_dir / "events.csv"
    rows = ["user_id,item_id,timestamp,rating"]
    for user in range(1, 7):
        for item in range(1, 6):
            if (user + item) % 3:
                rows.append(f"{user},{item},2026-01-0{1 + (user * item) % 5}T{user:02d}:00:00Z,{1 + (user + item) % 5}")
    events.write_text("\n".join(rows) + "\n")

    assert "candidates" in _run([cli, "--help"], cwd=run_dir, env=env)  # the console script is installed
    # both stages in one process (one JVM start): exactly what `solaris ingest ...` / `solaris candidates ...` run
    stages = [["ingest", "--input", str(events), *SPARK], ["candidates", "--as-of", "2026-01-07T00:00:00Z", *SPARK]]
    code = f"from solaris.cli import main\nfor argv in {stages!r}:\n    assert main(argv) == 0, argv"
    out = _run([python, "-c", code], cwd=run_dir, env=env)
    assert f"candidates: {run_dir / 'warehouse' / 'candidates'} pairs=" in out
    assert int(out.split("pairs=")[1].split()[0]) > 0
    assert (run_dir / "warehouse" / "events" / "_delta_log").is_dir()
    assert not (ROOT / "build").exists()
