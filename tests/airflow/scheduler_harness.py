"""A real Airflow installation in a temp dir: scheduler (LocalExecutor),
dag processor, triggerer and api-server on 127.0.0.1 (Airflow 3), or
scheduler, triggerer and webserver (Airflow 2.11, whose scheduler parses the
DAGs itself), each a process this harness starts and stops by PID (and its
process group, for the executor's workers). Runs are triggered and watched
through the REST API, exactly as a user or an external system would
(``/api/v2`` on 3.x; ``/api/v1`` with basic auth on 2.11, and a backfill is
the ``airflow dags backfill`` command there, as 2.11 has no backfill API).

The components get their configuration through ``AIRFLOW__*`` variables in
their own environment, never this process's, so the ``dag.test()`` tests that
share the pytest session keep their own AIRFLOW_HOME.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import IO, Any

from harness import AIRFLOW_2

BIN = Path(sys.executable).parent
START_WAIT = 240.0  # generous: two cores, other engineers' tests beside ours
TERMINAL = ("success", "failed")


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


class Airflow3Cluster:
    COMPONENTS = ("scheduler", "dag-processor", "triggerer", "api-server")
    HEALTHY_PARTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")

    def __init__(self, home: Path, dags: Path, extra_env: dict[str, str] | None = None) -> None:
        self.home = home
        self.dags = dags
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.logs = home / "component-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("AIRFLOW") and k != "LEASE_STORE_URL"}
        env.update({
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "6",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
            "AIRFLOW__CORE__AUTH_MANAGER":
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        env.update(extra_env or {})
        self.env = env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    # -- life cycle -------------------------------------------------------------
    def start(self) -> Airflow3Cluster:
        with open(self.logs / "db-migrate.out", "wb") as out:
            self.prepare_db(out)
        for name in self.COMPONENTS:
            self.start_component(name)
        poll(self._healthy, f"{', '.join(self.COMPONENTS)} to report healthy", START_WAIT, 1.0)
        return self

    def setup_commands(self) -> list[list[str]]:
        return [["db", "migrate"]]

    def setup(self, out: IO[bytes]) -> None:
        for command in self.setup_commands():
            subprocess.run([str(BIN / "airflow"), *command], env=self.env, check=True,
                           stdout=out, stderr=subprocess.STDOUT, timeout=START_WAIT)

    def prepare_db(self, out: IO[bytes]) -> None:
        """This cluster's own fresh metadata DB, migrated (on 2.11 with the API's
        user in it), before any component starts. Migrating takes 10 to 40 s
        on two cores, and what it writes depends on nothing that differs
        between clusters (only on the auth manager and on settings no cluster
        sets: the default pool's size, the log templates), so it runs once
        per session into a template that each cluster gets a copy of: a
        PostgreSQL DB from ``metadata_db()`` is such a copy already, and a
        SQLite file is copied here. Any other DB is set up as before."""
        url = self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        db = self.home / "airflow.db"
        if url == f"sqlite:///{db}":
            db.write_bytes(sqlite_template(type(self), self.env["AIRFLOW__CORE__AUTH_MANAGER"]))
        elif url not in _COPIES:
            self.setup(out)
            return
        out.write(b"the metadata DB is a copy of the session's migrated template\n")
        out.flush()
        self.write_config(out)

    def write_config(self, out: IO[bytes]) -> None:
        """This home's airflow.cfg, as any ``airflow`` command (the migration
        among them) writes it when it is missing, with a fresh fernet key.
        The components start together: each would write its own, and a
        trigger's kwargs encrypted with one key cannot be read with another."""
        subprocess.run([sys.executable, "-c", "from airflow.configuration import "
                        "write_default_airflow_configuration_if_needed as write; write()"],
                       env=self.env, check=True, stdout=out, stderr=subprocess.STDOUT,
                       timeout=START_WAIT)

    def start_component(self, name: str) -> None:
        out = open(self.logs / f"{name}.out", "ab")  # noqa: SIM115 - the child owns it
        self.procs[name] = subprocess.Popen(
            [str(BIN / "airflow"), name], env=self.env, stdout=out, stderr=subprocess.STDOUT,
            cwd=str(self.home), start_new_session=True,
        )
        out.close()

    def kill_component(self, name: str) -> None:
        """SIGKILL a component and the process group it leads (its children)."""
        proc = self.procs.pop(name)
        _signal_group(proc, signal.SIGKILL)
        proc.wait(30)

    def stop(self) -> None:
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(10)
        self.procs.clear()

    def started_pids(self) -> set[int]:
        return {proc.pid for proc in self.procs.values()}

    def kill_below(self, *pids: int) -> None:
        """SIGKILL processes a component started (the executor's workers,
        their tasks): each pinned by a pidfd and checked to descend from a
        component before any is signalled (a task is orphaned once its worker
        dies), so a pid that came round to another process is never hit."""
        pinned = [(pid, os.pidfd_open(pid)) for pid in pids]
        try:
            for pid, _ in pinned:
                if not self._below_a_component(pid):
                    raise AssertionError(f"pid {pid} is not below a component this test started")
            for _, pidfd in pinned:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            for _, pidfd in pinned:
                os.close(pidfd)

    def _below_a_component(self, pid: int) -> bool:
        roots = self.started_pids()
        while pid > 1:
            with open(f"/proc/{pid}/stat") as stat:  # ppid: the 2nd field after the name's ")"
                pid = int(stat.read().rsplit(")", 1)[1].split()[1])
            if pid in roots:
                return True
        return False

    def _healthy(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"airflow {name} exited with {proc.returncode}:\n"
                                     + self.tail(name))
        try:
            health = self.api("GET", "/api/v2/monitor/health")
        except (OSError, AssertionError):
            return False
        return all((health.get(part) or {}).get("status") == "healthy"
                   for part in self.HEALTHY_PARTS)

    def triggerer_healthy(self) -> bool:
        health = self.api("GET", "/api/v2/monitor/health")
        return bool((health.get("triggerer") or {}).get("status") == "healthy")

    def tail(self, name: str, lines: int = 80) -> str:
        path = self.logs / f"{name}.out"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    # -- REST API -----------------------------------------------------------------
    def api(self, method: str, path: str, body: Any = None) -> Any:
        path, body = self.translate(method, path, body)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method, headers={
            "Content-Type": "application/json", **self.auth_headers()})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            raise AssertionError(f"{method} {path}: HTTP {error.code}: {detail}") from None
        return json.loads(raw) if raw else None

    def translate(self, method: str, path: str, body: Any) -> tuple[str, Any]:
        """The call as this Airflow spells it (the tests write the 3.x one)."""
        return path, body

    def auth_headers(self) -> dict[str, str]:
        return {}  # SimpleAuthManager with every user an admin

    def wait_dag(self, dag_id: str, timeout: float = START_WAIT) -> None:
        def parsed() -> bool:
            try:
                self.api("GET", f"/api/v2/dags/{dag_id}")
            except AssertionError:
                return False
            return True

        poll(parsed, f"DAG {dag_id} to be parsed", timeout, 0.5)
        self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None,
                run_id: str | None = None, logical_date: str | None = None) -> str:
        body: dict[str, Any] = {"logical_date": logical_date, "conf": conf or {}}
        if run_id:
            body["dag_run_id"] = run_id
        run = self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)
        return str(run["dag_run_id"])

    def backfill(self, dag_id: str, from_date: str, to_date: str,
                 conf: dict[str, Any] | None = None) -> int:
        """Airflow refuses a backfill while its SQLite metadata DB is busy (HTTP
        503 "Database is locked"); a user retries, and so does this, for a
        bounded time."""
        body = {"dag_id": dag_id, "from_date": from_date, "to_date": to_date,
                "run_backwards": False, "dag_run_conf": conf or {}, "reprocess_behavior": "none",
                "max_active_runs": 1}

        def created() -> int | None:
            try:
                return int(self.api("POST", "/api/v2/backfills", body)["id"])
            except AssertionError as error:
                if "Database is locked" in str(error):
                    return None
                raise

        return int(poll(created, "Airflow to accept the backfill", 60.0, 1.0))

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")[
            "dag_runs"]
        return runs

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        return str(poll(lambda: (s := self.run_state(dag_id, run_id)) in TERMINAL and s,
                        f"run {run_id} of {dag_id} to end", timeout, 0.5))

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        tis = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")
        return {ti["task_id"]: ti["state"] for ti in tis["task_instances"]}

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        path = (f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/"
                f"{try_number}?full_content=true")
        content = self.api("GET", path).get("content")
        if isinstance(content, list):
            # Structured lines: keep every field (the exception's type is in error_detail).
            return "\n".join(json.dumps(line) if isinstance(line, dict) else str(line)
                             for line in content)
        return str(content)

    def keeper_log(self, dag_id: str, run_id: str, task_id: str = "dag_run_lease_keeper") -> str:
        """What a trigger logged for the task: its try's log and, after it, the
        triggerer's own lines for this run and task. Airflow 3 carries a
        trigger's log lines and its end on two sockets; when the end is read
        first, the trigger's log file is closed and its last lines (the
        keeper's verdict among them) go to the triggerer's output instead."""
        own = [line for line in (self.logs / "triggerer.out").read_text(errors="replace")
               .splitlines() if f"run_id={run_id}" in line and f"task_id={task_id}" in line]
        return "\n".join([self.task_log(dag_id, run_id, task_id), *own])


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # the group this harness created with start_new_session


class Airflow2Cluster(Airflow3Cluster):
    """Airflow 2.11: the scheduler parses the DAGs and the webserver (Flask,
    gunicorn) serves ``/api/v1`` behind basic auth; a task runs under
    ``LocalTaskJob`` and the standard task runner, which log to files under
    ``logs/`` (read directly). LocalExecutor needs a server metadata DB there
    (2.11 refuses it on SQLite): pass ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``."""

    COMPONENTS = ("scheduler", "triggerer", "webserver")
    HEALTHY_PARTS = ("metadatabase", "scheduler", "triggerer")  # parsing is the scheduler's
    USER, PASSWORD = "admin", secrets.token_hex(8)

    def __init__(self, home: Path, dags: Path, extra_env: dict[str, str] | None = None) -> None:
        super().__init__(home, dags, extra_env)
        if self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("sqlite"):
            raise ValueError("Airflow 2.11 runs LocalExecutor on a server DB only: pass "
                             "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN (see metadata_db())")
        self.env.update({
            "AIRFLOW__CORE__AUTH_MANAGER":
                "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager",
            "AIRFLOW__WEBSERVER__WEB_SERVER_HOST": "127.0.0.1",
            "AIRFLOW__WEBSERVER__WEB_SERVER_PORT": str(self.port),
            "AIRFLOW__WEBSERVER__WORKERS": "1",
            "AIRFLOW__WEBSERVER__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__API__AUTH_BACKENDS": "airflow.api.auth.backend.basic_auth",
            "AIRFLOW__SCHEDULER__DAG_DIR_LIST_INTERVAL": "2",
            "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "600",
            "AIRFLOW__SCHEDULER__PARSING_PROCESSES": "1",
            # A task process that exits without recording its state (the fail-stop
            # exit, a SIGKILL) is failed by the scheduler's zombie check.
            "AIRFLOW__SCHEDULER__SCHEDULER_ZOMBIE_TASK_THRESHOLD": "20",
            "AIRFLOW__SCHEDULER__ZOMBIE_DETECTION_INTERVAL": "2",
            # 2.11's LocalExecutor workers dispose the engine they inherit at
            # fork (local_executor.py, LocalWorkerBase.run), which closes the
            # parent's pooled connections under it: on a loaded machine the
            # parent's next query (a backfill's first) then meets "server
            # closed the connection unexpectedly". No pool, nothing to share.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_ENABLED": "False",
            # The roles' permissions are synced once, into the session's
            # template DB (``setup_commands``): a webserver syncing them again
            # at every start made each cluster's start about 7 s longer.
            "AIRFLOW__FAB__UPDATE_FAB_PERMS": "False",
        })
        self.backfills: list[subprocess.Popen[bytes]] = []

    def setup_commands(self) -> list[list[str]]:
        # sync-perm adds every view's permissions and syncs the roles whatever
        # UPDATE_FAB_PERMS says: what each webserver start did before
        return [["db", "migrate"], ["sync-perm"],
                ["users", "create", "--username", self.USER, "--password", self.PASSWORD,
                 "--role", "Admin", "--firstname", "A", "--lastname", "Dmin",
                 "--email", "admin@example.invalid"]]

    def stop(self) -> None:
        for proc in self.backfills:
            _signal_group(proc, signal.SIGKILL)
            proc.wait(30)
        self.backfills.clear()
        super().stop()

    def translate(self, method: str, path: str, body: Any) -> tuple[str, Any]:
        """The call a 3.x test writes, as 2.11's ``/api/v1`` spells it."""
        path = path.replace("/api/v2/monitor/health", "/api/v1/health").replace(
            "/api/v2/", "/api/v1/")
        if method == "PATCH" and "/taskInstances/" in path and isinstance(body, dict):
            body = {"dry_run": False, **body}  # v1 defaults to a dry run
        if method == "PATCH" and path.count("/") == 4 and path.startswith("/api/v1/dags/"):
            path += "?update_mask=" + ",".join(body or {})  # pause/unpause a DAG
        return path, body

    def auth_headers(self) -> dict[str, str]:
        auth = base64.b64encode(f"{self.USER}:{self.PASSWORD}".encode()).decode()
        return {"Authorization": f"Basic {auth}"}

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None,
                run_id: str | None = None, logical_date: str | None = None) -> str:
        body: dict[str, Any] = {"conf": conf or {}}
        if logical_date:
            body["logical_date"] = logical_date
        if run_id:
            body["dag_run_id"] = run_id
        return str(self.api("POST", f"/api/v1/dags/{dag_id}/dagRuns", body)["dag_run_id"])

    def backfill(self, dag_id: str, from_date: str, to_date: str,
                 conf: dict[str, Any] | None = None) -> int:
        """``airflow dags backfill`` (2.11's only way): a process running the
        runs itself through its own LocalExecutor, beside the scheduler. Both
        dates are included, as in the 3.x API call the tests make."""
        out = open(self.logs / f"backfill-{len(self.backfills)}.out", "ab")  # noqa: SIM115
        command = [str(BIN / "airflow"), "dags", "backfill", "-s", from_date[:10], "-e",
                   to_date[:10], "-c", json.dumps(conf or {}), dag_id]
        self.backfills.append(subprocess.Popen(command, env=self.env, stdout=out,
                                               stderr=subprocess.STDOUT, cwd=str(self.home),
                                               start_new_session=True))
        out.close()
        return self.backfills[-1].pid

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """The try's log and, after it, what its triggers logged (2.11 writes
        those to ``attempt=N.log.trigger.<triggerer job>.log`` beside it)."""
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        paths = sorted(folder.glob(f"attempt={try_number}.log*"), key=lambda p: len(p.name))
        return "\n".join(path.read_text(errors="replace") for path in paths)

    def keeper_log(self, dag_id: str, run_id: str, task_id: str = "dag_run_lease_keeper") -> str:
        """2.11's triggerer writes a trigger's lines to the file beside the try."""
        return self.task_log(dag_id, run_id, task_id)


#: The cluster class for the installed Airflow.
AirflowCluster: type[Airflow3Cluster] = Airflow2Cluster if AIRFLOW_2 else Airflow3Cluster
#: What a task's log says when its process exited with the fail-stop status 75.
EXIT_75_LOGGED = "Task exited with return code 75" if AIRFLOW_2 else '"exit_code": 75'

#: The session's migrated templates: a SQLite file's bytes per cluster class
#: and auth manager, a PostgreSQL template database's name per server.
_SQLITE_TEMPLATES: dict[tuple[type[Airflow3Cluster], str], bytes] = {}
_PG_TEMPLATES: dict[str, str] = {}
#: The URLs of the PostgreSQL DBs ``metadata_db()`` copied from a template.
_COPIES: set[str] = set()


def _migrate_template(cls: type[Airflow3Cluster], env: dict[str, str], home: Path) -> None:
    """Runs the setup commands (migrate; on 2.11 the user too) of a cluster of
    ``cls`` with ``env`` in ``home``, whose components never start."""
    template = cls(home, home, env)
    log = template.logs / "db-migrate.out"
    try:
        with open(log, "wb") as out:
            template.setup(out)
    except subprocess.CalledProcessError as error:
        raise AssertionError(f"{error}:\n{log.read_text(errors='replace')[-4000:]}") from None


def sqlite_template(cls: type[Airflow3Cluster], auth_manager: str) -> bytes:
    """A migrated SQLite metadata DB, migrated in a throwaway home on first
    use. Read once the migration's process has exited, after a checkpoint
    (Airflow runs SQLite in WAL mode): the bytes are the whole DB."""
    if (cls, auth_manager) not in _SQLITE_TEMPLATES:
        with tempfile.TemporaryDirectory(prefix="lease-airflow-template-") as home:
            _migrate_template(cls, {"AIRFLOW__CORE__AUTH_MANAGER": auth_manager}, Path(home))
            db = Path(home) / "airflow.db"
            with contextlib.closing(sqlite3.connect(db)) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if db.with_name("airflow.db-wal").exists():
                raise AssertionError(f"{db} is still open after its migration")
            _SQLITE_TEMPLATES[cls, auth_manager] = db.read_bytes()
    return _SQLITE_TEMPLATES[cls, auth_manager]


def metadata_db(server: Any) -> str:
    """A fresh PostgreSQL metadata DB of its own for one cluster, already
    migrated: a copy (``CREATE DATABASE ... TEMPLATE``, a file copy inside
    the server) of one migrated once per session on this server and never
    used by a cluster (a template must have no connection while it is copied)."""
    import psycopg
    from servers.postgres_server import PASSWORD, USER

    # SQLAlchemy 1.4 (Airflow 2.11) has no psycopg 3 dialect: psycopg2 there.
    driver = "psycopg2" if AIRFLOW_2 else "psycopg"

    def create(template: str | None) -> str:
        name = f"airflow_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(server.admin_conninfo, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} OWNER {USER}"
                         + (f" TEMPLATE {template}" if template else ""))
        return f"postgresql+{driver}://{USER}:{PASSWORD}@127.0.0.1:{server.port}/{name}"

    template = _PG_TEMPLATES.get(server.admin_conninfo)
    if template is None:
        url = create(None)
        # psycopg 3 serves both engines (Airflow's async default would need asyncpg).
        env = {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
               "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": url}
        with tempfile.TemporaryDirectory(prefix="lease-airflow-template-") as home:
            _migrate_template(AirflowCluster, env, Path(home))
        template = _PG_TEMPLATES[server.admin_conninfo] = url.rsplit("/", 1)[1]
    url = create(template)
    _COPIES.add(url)
    return url
