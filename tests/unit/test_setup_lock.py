"""The set-up's shared dependency venv under the cache's lock (scripts/cached-venv.sh, scripts/cache-lock.sh).

Why: two set-ups at once on a cold cache (two CI runs, a user and CI) used to delete each other's
half-built venv and pip-install into the same folder. Now the one that builds holds the lock and builds
in a temporary renamed into place; the other waits and reuses it. These tests run the real script on a
stub requirement set (nothing to install, no network) in a temporary cache: a few seconds of
`python -m venv` each, no Spark.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cached-venv.sh"
SAFETY_TIMEOUT = 180  # seconds; only so a broken lock fails the test instead of hanging it

# Run by cached-venv.sh right after it takes the lock: marks "a set-up is inside the locked section",
# then holds it there until the test opens the gate. $PPID is the set-up's shell.
GATE_HOOK = """#!/bin/sh
touch "$GATE/inside.$PPID"
while [ ! -e "$GATE/open" ]; do sleep 0.05; done
"""


def _environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# a stub requirement set: nothing to install\n")
    env = {key: value for key, value in os.environ.items() if key != "SOLARIS_SETUP_LOCKED_HOOK"}
    env.update(
        SOLARIS_CACHE=str(tmp_path / "cache"),
        SOLARIS_REQUIREMENTS=str(requirements),
        SOLARIS_NO_DEPS="",
        SOLARIS_PIP_UPGRADE="0",
        PIP_NO_INDEX="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        **extra,
    )
    return env


def _start(env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    with log.open("w") as stderr:
        return subprocess.Popen(["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                start_new_session=True)


def _stop(process: subprocess.Popen[str]) -> None:
    """A set-up the test gives up on, with its children (pip, the hook)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _finish(process: subprocess.Popen[str]) -> str:
    try:
        out, _ = process.communicate(timeout=SAFETY_TIMEOUT)
    finally:
        _stop(process)
    assert process.returncode == 0
    return out.strip()


def _check_venv(cache: Path, venv: Path) -> None:
    """The only thing in the cache, complete, and working at its final path (not the temporary's)."""
    assert re.fullmatch(r"venv-[0-9a-f]{16}", venv.name) and venv.parent == cache
    assert sorted(path.name for path in cache.iterdir()) == [".setup.lock", venv.name]  # no temporaries
    assert (venv / ".complete").is_file()
    prefix = subprocess.run([venv / "bin" / "python", "-c", "import sys; print(sys.prefix)"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert prefix == str(venv)
    # a console script: its shebang was rewritten from the temporary's path to the final one
    assert (venv / "bin" / "pip").read_text().startswith(f"#!{venv}/bin/python")  # as setup.sh's step 2 reads it
    pip = subprocess.run([venv / "bin" / "pip", "--version"], capture_output=True, text=True, check=True)
    assert str(venv) in pip.stdout
    left = [path.name for path in (venv / "bin").iterdir()
            if not path.is_symlink() and ".building-" in path.read_text(errors="replace")]
    assert left == []  # activate scripts included


def test_two_set_ups_at_once_build_the_venv_once(tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()
    hook = tmp_path / "hook.sh"
    hook.write_text(GATE_HOOK)
    hook.chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir()
    env = _environment(tmp_path, SOLARIS_SETUP_LOCKED_HOOK=str(hook), GATE=str(gate))
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    processes = [_start(env, log) for log in logs]
    try:
        # Hold whichever got the lock inside it until the other says it waits for it. Without the
        # lock, both would come inside: that fails here, whatever the order and timing.
        deadline = time.monotonic() + SAFETY_TIMEOUT
        while True:
            inside = sorted(path.name for path in gate.glob("inside.*"))
            assert len(inside) <= 1, f"two set-ups inside the locked section at once: {inside}"
            waiting = [log for log in logs if "[setup] waiting for another set-up" in log.read_text()]
            if inside and waiting:
                break
            assert all(process.poll() is None for process in processes), [log.read_text() for log in logs]
            assert time.monotonic() < deadline, [log.read_text() for log in logs]
            time.sleep(0.05)
    except BaseException:
        for process in processes:
            _stop(process)
        raise
    finally:
        (gate / "open").touch()
    venvs = [_finish(process) for process in processes]

    texts = [log.read_text() for log in logs]
    assert venvs[0] == venvs[1], texts
    _check_venv(cache, Path(venvs[0]))
    built = [text for text in texts if "[setup] creating dependency virtualenv" in text]
    reused = [text for text in texts if "[setup] reusing dependency virtualenv" in text]
    assert len(built) == 1 and len(reused) == 1, texts
    assert f"[setup] waiting for another set-up holding {cache}/.setup.lock" in reused[0]
    assert "waiting" not in built[0]


def test_a_killed_builds_temporaries_are_removed_and_a_complete_venv_is_reused_without_the_lock(tmp_path):
    cache = tmp_path / "cache"
    # what a set-up killed while building leaves: its temporary venv, a partial class-data archive
    stale_venv = cache / "venv-0123456789abcdef.building-4242"
    (stale_venv / "bin").mkdir(parents=True)
    stale_archive = cache / "spark-classes-0123456789abcdef.jsa.building-4243"
    stale_archive.write_bytes(b"partial")
    env = _environment(tmp_path)
    log = tmp_path / "build.log"
    venv = Path(_finish(_start(env, log)))
    text = log.read_text()
    assert f"[setup] removing {stale_venv}" in text and f"[setup] removing {stale_archive}" in text
    assert "[setup] creating dependency virtualenv" in text
    _check_venv(cache, venv)

    # A complete venv is reused without taking the lock: this one is held meanwhile (were it taken,
    # the set-up would wait until the safety timeout).
    with (cache / ".setup.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        log = tmp_path / "reuse.log"
        assert _finish(_start(env, log)) == str(venv)
    assert log.read_text().strip() == f"[setup] reusing dependency virtualenv {venv}"
