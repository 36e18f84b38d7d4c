"""A real Airflow 2.11 ``airflow webserver`` (Flask, gunicorn, one worker) for
the Leases page tests: a temp AIRFLOW_HOME with a migrated SQLite metadata
DB, the FAB auth manager, users made with ``airflow users create`` in the
roles each test needs, on a free 127.0.0.1 port, started and stopped by PID.

The roles and users are made by ``setup_users.py`` through FAB's security
manager, after Airflow's own role sync has created the view's permissions.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from api_server import free_port, poll

BIN = Path(sys.executable).parent
SETUP = Path(__file__).with_name("setup_users.py")
START_WAIT = 240.0

#: name -> (role, permissions the role gets: (action, resource) pairs).
#: ``reader`` may read the page and DAGs ``billing`` and ``dag_a``; ``breaker``
#: may also break, on those DAGs only; ``viewer`` (Airflow's Viewer) has no
#: Leases rights.
ROLES: dict[str, list[tuple[str, str]]] = {
    "LeaseReader": [("can_read", "Leases"), ("menu_access", "Leases"), ("menu_access", "Browse"),
                    ("can_read", "DAG:billing"), ("can_read", "DAG:dag_a"), ("can_read", "Website")],
    "LeaseBreaker": [("can_read", "Leases"), ("can_delete", "Leases"), ("menu_access", "Leases"),
                     ("menu_access", "Browse"), ("can_read", "DAG:billing"), ("can_read", "DAG:dag_a"),
                     ("can_read", "Website")],
}
USERS = {"admin": "Admin", "viewer": "Viewer", "reader": "LeaseReader", "breaker": "LeaseBreaker"}


class Webserver2:
    def __init__(self, home: Path, store_db: Path) -> None:
        self.home = home
        self.store_url = f"sqlite://{store_db}"
        #: The page finds its store exactly as the tasks do: the ``lease_default``
        #: Connection, here in the metadata DB (as ``airflow connections add`` puts it).
        self.store_uri = f"sqlite:///{store_db}"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.passwords = {user: secrets.token_urlsafe(12) for user in USERS}
        home.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("AIRFLOW") and k != "LEASE_STORE_URL"}
        env.update({
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__AUTH_MANAGER":
                "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__WEBSERVER__WEB_SERVER_HOST": "127.0.0.1",
            "AIRFLOW__WEBSERVER__WEB_SERVER_PORT": str(self.port),
            "AIRFLOW__WEBSERVER__WORKERS": "1",
            "AIRFLOW__WEBSERVER__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__WEBSERVER__BASE_URL": self.base,
            # FAB limits sign-ins to 5 per 40 s per address; the suite signs in more often.
            "AIRFLOW__WEBSERVER__AUTH_RATE_LIMITED": "False",
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        self.env = env
        self.log = home / "webserver.out"
        self.proc: subprocess.Popen[bytes] | None = None

    def airflow(self, *args: str) -> None:
        with open(self.home / "setup.out", "ab") as out:
            subprocess.run([str(BIN / "airflow"), *args], env=self.env, check=True, stdout=out,
                           stderr=subprocess.STDOUT, timeout=START_WAIT)

    def setup(self, *args: str) -> None:
        with open(self.home / "setup.out", "ab") as out:
            subprocess.run([sys.executable, str(SETUP), *args], env=self.env, check=True,
                           stdout=out, stderr=subprocess.STDOUT, timeout=START_WAIT)

    def set_connection(self, uri: str) -> None:
        """Points ``lease_default`` (in the metadata DB) at ``uri``."""
        self.setup("connection", uri)

    def start(self) -> Webserver2:
        (self.home / "dags").mkdir(exist_ok=True)
        self.airflow("db", "migrate")
        spec = self.home / "users.json"
        spec.write_text(json.dumps({"roles": ROLES, "store_uri": self.store_uri, "users": {
            user: [role, self.passwords[user]] for user, role in USERS.items()}}))
        self.setup("users", str(spec))
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([str(BIN / "airflow"), "webserver"], env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, cwd=str(self.home),
                                         start_new_session=True)
        poll(self._up, "the webserver to answer", START_WAIT, 0.5)
        return self

    def _up(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"webserver exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        """SIGTERM the gunicorn master's process group, SIGKILL after 30 s."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    @contextmanager
    def session(self, user: str | None) -> Iterator[httpx.Client]:
        """A client signed in through FAB's login form (its CSRF token
        included), as a browser is; None: anonymous. Closed afterwards."""
        with httpx.Client(base_url=self.base, timeout=30, follow_redirects=False) as client:
            self._sign_in(client, user)
            yield client

    def _sign_in(self, client: httpx.Client, user: str | None) -> None:
        if user is not None:
            form = client.get("/login/")
            csrf = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', form.text)
            assert csrf, form.text[:2000]
            answer = client.post("/login/", data={"username": user, "password": self.passwords[user],
                                                  "csrf_token": csrf.group(1)})
            assert answer.status_code == 302 and "/login" not in answer.headers["location"], \
                answer.text[:2000]
