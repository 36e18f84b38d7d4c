"""A real ``airflow api-server`` for the Leases page tests: a temp
AIRFLOW_HOME with a migrated SQLite metadata DB, SimpleAuthManager users
``admin`` (ADMIN) and ``viewer`` (VIEWER) with passwords from a file, one
worker on a free 127.0.0.1 port, started and stopped by PID.

The plugin is found through the ``airflow.plugins`` entry point that
pyproject.toml declares. When the environment was installed before that
entry point existed, a throwaway ``.dist-info`` carrying the same entry point
(read from pyproject.toml) goes on the server's PYTHONPATH, so Airflow still
loads the plugin the way it loads it for users.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
START_WAIT = 180.0
GROUP = "airflow.plugins"
USERS = {"admin": "ADMIN", "viewer": "VIEWER"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def poll(predicate: Any, what: str, timeout: float, interval: float = 0.25) -> Any:
    """A bounded poll on something observable; the interval only paces it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def declared_plugin_entry_point() -> tuple[str, str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        points = tomllib.load(f)["project"]["entry-points"][GROUP]
    ((name, target),) = points.items()
    return name, target


def entry_point_shim(site: Path) -> Path | None:
    """A dist-info with our entry point, unless the installed metadata has it."""
    name, target = declared_plugin_entry_point()
    if any(ep.value == target for ep in metadata.entry_points(group=GROUP)):
        return None
    info = site / "lease_integrations_ui_entry_point-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: lease_integrations_ui_entry_point\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{name} = {target}\n")
    return site


#: A migrated metadata DB's bytes per auth manager, for ``ApiServer.migrate``.
_MIGRATED: dict[str, bytes] = {}
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


class ApiServer:
    def __init__(self, home: Path, store_db: Path, *, users: dict[str, str] | None = None,
                 auth_manager: str = SIMPLE_AUTH_MANAGER, python_path: tuple[str, ...] = (),
                 extra_env: dict[str, str] | None = None) -> None:
        """``users``: name -> SimpleAuthManager role; ``auth_manager`` may name
        a subclass importable from ``python_path``; ``extra_env`` is added last."""
        users = users or USERS
        self.home = home
        self.store_url = f"sqlite://{store_db}"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.passwords = {user: secrets.token_urlsafe(12) for user in users}
        password_file = home / "passwords.json"
        home.mkdir(parents=True, exist_ok=True)
        password_file.write_text(json.dumps(self.passwords))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("AIRFLOW") and k != "LEASE_STORE_URL"}
        shim = entry_point_shim(home / "site")
        path = [p for p in (str(shim) if shim else "", *python_path,
                            os.environ.get("PYTHONPATH", "")) if p]
        env.update({
            "PYTHONPATH": os.pathsep.join(path),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__AUTH_MANAGER": auth_manager,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS":
                ",".join(f"{u}:{r}" for u, r in users.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(password_file),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__BASE_URL": self.base + "/",
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            # The page finds its store exactly as the tasks do: this Connection.
            "AIRFLOW_CONN_LEASE_DEFAULT": f"sqlite:///{store_db}",
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        env.update(extra_env or {})
        self.env = env
        self.log = home / "api-server.out"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ApiServer:
        (self.home / "dags").mkdir(exist_ok=True)
        self.migrate()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([str(BIN / "airflow"), "api-server"], env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, cwd=str(self.home),
                                         start_new_session=True)
        poll(self._up, "the api-server to answer", START_WAIT, 0.5)
        return self

    def migrate(self) -> None:
        """The metadata DB: migrated by the session's first server with this
        auth manager (which may bring tables of its own), a copy of that for
        every later one. Migrating takes 10 to 25 s on two cores and what it
        writes depends on nothing else that differs between these servers."""
        db = self.home / "airflow.db"
        own_file = self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{db}"
        auth_manager = self.env["AIRFLOW__CORE__AUTH_MANAGER"]
        if own_file and auth_manager in _MIGRATED:
            db.write_bytes(_MIGRATED[auth_manager])
            return
        with open(self.home / "db-migrate.out", "wb") as out:
            subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=self.env, check=True,
                           stdout=out, stderr=subprocess.STDOUT, timeout=START_WAIT)
        if own_file:
            # The migration's process has exited; a checkpoint moves what its
            # write-ahead log (Airflow runs SQLite in WAL mode) may still hold
            # into the file, which then is the whole DB.
            with contextlib.closing(sqlite3.connect(db)) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if db.with_name("airflow.db-wal").exists():
                raise AssertionError(f"{db} is still open after its migration")
            _MIGRATED[auth_manager] = db.read_bytes()

    def stop(self) -> None:
        """SIGTERM the server's process group; uvicorn logs "Finished server
        process" when done, but a leftover non-daemon thread can keep the
        process alive after that, so a finished server is then SIGKILLed."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            poll(lambda: proc.poll() is not None or "Finished server process" in self.tail(5),
                 "the api-server to shut down", 30.0, 0.2)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def _up(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"api-server exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(self.base + "/api/v2/monitor/health", timeout=5) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def token(self, user: str) -> str:
        """A JWT from SimpleAuthManager's login endpoint, as the UI gets one."""
        body = json.dumps({"username": user, "password": self.passwords[user]}).encode()
        request = urllib.request.Request(self.base + "/auth/token", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            token: str = json.loads(response.read())["access_token"]
            return token


@contextmanager
def running(server: ApiServer) -> Iterator[ApiServer]:
    """A started server, its log printed if the block fails, stopped and its
    home removed afterwards."""
    try:
        server.start()
        yield server
    except BaseException:
        print(server.tail())
        raise
    finally:
        server.stop()
        shutil.rmtree(server.home, ignore_errors=True)
