"""The embedded Airflow UI as a user meets it, for the end-to-end test: a real server, a real browser.

* :class:`AirflowUI`: ``scripts/airflow-ui.sh`` (``airflow standalone``: API server, scheduler,
  dag-processor, triggerer) started on a free port of 127.0.0.1 with the test's environment, its REST
  API (a token from the simple auth manager's generated password, as a user reads it), and a clean
  stop of its whole process group.
* :func:`logged_in_page`: headless Chromium from Debian's package (``make setup`` installs it;
  ``$SOLARIS_CHROMIUM`` points elsewhere), driven by Playwright from PyPI, which downloads no
  browser; the page is past the login form.

A helper module of tests/e2e, not a test module.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("SOLARIS_CHROMIUM", "/usr/bin/chromium")
USER = "admin"  # the simple auth manager's default user; its password is generated at first start


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class AirflowUI:
    """A running ``scripts/airflow-ui.sh``: its URL, Airflow home and log; REST calls with a token."""

    url: str
    home: Path
    log: Path
    process: subprocess.Popen
    token: str = ""

    @classmethod
    @contextmanager
    def running(cls, env: dict[str, str], home: Path, *, timeout_s: float = 240) -> Iterator[AirflowUI]:
        """Start the UI on a free port, wait until it serves ``solaris_precompute``, stop it on exit."""
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        log = home / "standalone.log"
        # the task runners reach the API server through base_url: it must name the port we chose
        # the DAG files parsed once: nothing edits them during a test, and each parse is a process
        env = {**env, "SOLARIS_AIRFLOW_HOME": str(home), "AIRFLOW__API__PORT": str(port),
               "AIRFLOW__API__BASE_URL": url, "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
               "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "3600"}
        with open(log, "wb") as out:
            # not a new session here: the script's `setsid` makes it one, so its pid is the group to stop
            process = subprocess.Popen(["bash", "scripts/airflow-ui.sh"], cwd=ROOT, env=env, stdout=out,
                                       stderr=subprocess.STDOUT)
        ui = cls(url=url, home=home, log=log, process=process)
        try:
            ui._wait_until_serving(timeout_s)
            yield ui
        finally:
            ui._stop()

    def _wait_until_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"airflow-ui.sh exited {self.process.returncode}:\n{self.log_tail()}")
            try:
                if not self.token:
                    self.token = self._token()
                self.get("/api/v2/dags/solaris_precompute")
                self.get("/api/v2/dags/solaris_enrichment")
                return
            except (OSError, urllib.error.URLError, KeyError, ValueError):
                time.sleep(2)
        raise AssertionError(f"the Airflow UI did not serve the DAGs within {timeout_s:.0f} s:\n{self.log_tail()}")

    def password(self) -> str:
        return json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())[USER]

    def _token(self) -> str:
        body = json.dumps({"username": USER, "password": self.password()}).encode()
        request = urllib.request.Request(f"{self.url}/auth/token", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())["access_token"]

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        """(HTTP status, decoded JSON) of a REST call; error statuses are returned, not raised."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def get(self, path: str) -> Any:
        status, payload = self.request("GET", path)
        if status != 200:
            raise ValueError(f"GET {path}: HTTP {status} {payload}")
        return payload

    def runs(self, dag_id: str) -> list[dict]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns?order_by=run_after")["dag_runs"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        quoted = urllib.request.quote(run_id, safe="")
        instances = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{quoted}/taskInstances")["task_instances"]
        return {instance["task_id"]: instance["state"] for instance in instances}

    def wait_until_unpaused(self, dag_id: str, *, timeout_s: float) -> None:
        """Returns once ``dag_id`` is unpaused; the trigger form sends its unpause beside the trigger, unawaited."""
        deadline = time.monotonic() + timeout_s
        while self.get(f"/api/v2/dags/{dag_id}")["is_paused"]:
            if time.monotonic() > deadline:
                raise AssertionError(f"{dag_id} still paused after {timeout_s:.0f} s\n{self.log_tail()}")
            time.sleep(1)

    def wait_for_run(self, dag_id: str, run_type: str, *, timeout_s: float) -> dict:
        """The first run of ``dag_id`` of that type, once it has finished; fails with its task states."""
        deadline = time.monotonic() + timeout_s
        run: dict | None = None
        while time.monotonic() < deadline:
            run = next((run for run in self.runs(dag_id) if run["run_type"] == run_type), None)
            if run and run["state"] in ("success", "failed"):
                return run
            time.sleep(3)
        states = self.task_states(dag_id, run["dag_run_id"]) if run else "no run"
        raise AssertionError(f"{dag_id} {run_type} run not finished in {timeout_s:.0f} s: {states}\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def _group_alive(self) -> bool:
        self.process.poll()  # reap the script's own pid once it has exited, so it no longer counts
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def _stop(self) -> None:
        """SIGTERM to the whole group (API server, scheduler, their task runners), SIGKILL what outlives 30 s."""
        for sig, grace_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
            if not self._group_alive():
                break
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace_s
            while self._group_alive() and time.monotonic() < deadline:
                time.sleep(0.5)
        self.process.wait(timeout=10)


@contextmanager
def logged_in_page(ui: AirflowUI) -> Iterator[Any]:
    """A Playwright page of headless Debian Chromium, signed in to ``ui`` through its login form."""
    from playwright.sync_api import sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        raise AssertionError(f"no browser at {CHROMIUM}: `make setup` installs Debian's chromium "
                             "(or set $SOLARIS_CHROMIUM)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(f"{ui.url}/")
            page.get_by_label("Username").fill(USER)
            page.get_by_label("Password").fill(ui.password())
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(f"{ui.url}/")
            yield page
        finally:
            browser.close()
