"""DAGs for the fail-stop tests (issue 23): a lost lease ends the task's
process and every process it started. Run by ``dag.test()`` and by the real
scheduler (``test_airflow_failstop.py``).

Each task leaves its evidence in ``$FAILSTOP_RECORD_DIR/<tag>/`` (the tag is
the run's ``conf["tag"]``, ``dagtest`` under ``dag.test()``):

- ``ticks``: one wall-clock time per line, written by every process while it works;
- ``lost``: when the lease's ``on_lost`` callback ran (the moment the loss was known);
- ``pids``: the processes the task started, written once all of them work;
- ``ended``: the task's work returned (it never should: the test breaks the lease);
- ``on_kill``: when the operator's ``on_kill()`` stopped its external work.
"""

# ruff: noqa: SIM117  (the lease block reads best nested inside the DAG block)
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

try:  # Airflow 3
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.11
    from airflow import DAG
    from airflow.operators.bash import BashOperator

from lease_integrations.airflow import LeasedPythonOperator
from lease_integrations.airflow.dag_run_lease import dag_run_lease
from lease_integrations.keeper.descendants import descendants

RECORD = Path(os.environ.get("FAILSTOP_RECORD_DIR", "/tmp/failstop-records"))
#: A ttl long enough for a loaded scheduler to start the run's tasks inside it,
#: with a short heartbeat: a loss is known within 2 s, and the ladder's bound
#: (heartbeat + grace) is 3 s. Margin ttl/5 = 4 s, grace margin/4 = 1 s.
TTL, HEARTBEAT = 20.0, 2.0
START = datetime(2026, 1, 1)

#: A child process that ticks, and starts a grandchild (in a session of its
#: own, like the child) that ticks too.
TICKER = """
import os, subprocess, sys, time
path, depth = sys.argv[1], int(sys.argv[2])
if depth:
    subprocess.Popen([sys.executable, "-c", sys.argv[3], path, "0", ""], start_new_session=True)
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
while True:
    os.write(fd, f"{time.time():.6f} child{depth}\\n".encode())
    time.sleep(0.02)
"""

#: ``sleep 60`` in bash, beside a loop that ticks; bash's pid and the sleep's
#: are written once both run.
BASH = """
d="$FAILSTOP_RECORD_DIR/{{ (dag_run.conf or {}).get('tag', 'dagtest') }}"
sleep 60 &
date +%s.%N >> "$d/ticks"
echo $$ $! > "$d/pids"
while :; do date +%s.%N >> "$d/ticks"; sleep 0.05; done
"""

#: The same, and a ticking loop that bash starts in a session of its own
#: (``setsid``: out of reach of ``BashOperator.on_kill``'s process-group SIGTERM).
BASH_DAEMON = """
d="$FAILSTOP_RECORD_DIR/{{ (dag_run.conf or {}).get('tag', 'dagtest') }}"
sleep 60 &
s=$!
setsid sh -c 'while :; do date +%s.%N >> "$1/ticks"; sleep 0.05; done' sh "$d" &
date +%s.%N >> "$d/ticks"
echo $$ $s $! > "$d/pids"
while :; do date +%s.%N >> "$d/ticks"; sleep 0.05; done
"""


def evidence(context: Any) -> Path:
    tag = (context["dag_run"].conf or {}).get("tag", "dagtest")
    directory = RECORD / tag
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def record_loss(context: Any) -> Path:
    """Write ``lost`` when the task's lease is lost (the ladder's step 2)."""
    directory = evidence(context)
    context["lease"].on_lost(lambda _lease: (directory / "lost").write_text(f"{time.time():.6f}"))
    return directory


def start_child_and_wait(**context: Any) -> None:
    directory = record_loss(context)
    ticks = directory / "ticks"
    child = subprocess.Popen([sys.executable, "-c", TICKER, str(ticks), "1", TICKER],
                             start_new_session=True)
    while not {"child0", "child1"} <= ({line.split()[1] for line in ticks.read_text(
            ).splitlines()} if ticks.exists() else set()):
        time.sleep(0.01)  # until the child and the grandchild both tick
    (directory / "pids").write_text(" ".join(str(pid) for pid in descendants()))
    child.wait()
    (directory / "ended").write_text(f"{time.time():.6f}")


def threads_and_child(**context: Any) -> None:
    """Two worker threads that tick, beside a child and grandchild that tick."""
    directory = evidence(context)
    fd = os.open(directory / "ticks", os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def work(who: str) -> None:
        while True:
            os.write(fd, f"{time.time():.6f} {who}\n".encode())
            time.sleep(0.02)

    for i in range(2):
        threading.Thread(target=work, args=(f"thread{i}",), daemon=True).start()
    start_child_and_wait(**context)


class StopsExternalWork(LeasedPythonOperator):  # type: ignore[misc]
    """An operator whose ``on_kill()`` stops work outside the process (as the
    Kubernetes or Spark operators do); here it leaves a mark of when it ran."""

    def on_kill(self) -> None:
        tag = "dagtest"
        (RECORD / tag).mkdir(parents=True, exist_ok=True)
        (RECORD / tag / "on_kill").write_text(f"{time.time():.6f}")
        super().on_kill()


# A leased callable that starts a child (which starts a grandchild) and waits.
with DAG(dag_id="lf_child", schedule=None, start_date=START,
         default_args={"retries": 0}) as lf_child:
    LeasedPythonOperator(task_id="job", python_callable=start_child_and_wait, lease_ttl=TTL,
                         lease_heartbeat=HEARTBEAT)

# A BashOperator (``sleep 60``) under the DAG run's lease.
with DAG(dag_id="lf_bash", schedule=None, start_date=START,
         default_args={"retries": 0}) as lf_bash:
    with dag_run_lease(lease_key="lf-bash", lease_ttl=TTL, lease_heartbeat=HEARTBEAT,
                       on_busy="fail"):
        BashOperator(task_id="bash", bash_command=BASH, pre_execute=record_loss)

# The same with a daemon in a session of its own.
with DAG(dag_id="lf_bash_daemon", schedule=None, start_date=START,
         default_args={"retries": 0}) as lf_bash_daemon:
    with dag_run_lease(lease_key="lf-bash-daemon", lease_ttl=TTL, lease_heartbeat=HEARTBEAT,
                       on_busy="fail"):
        BashOperator(task_id="bash", bash_command=BASH_DAEMON, pre_execute=record_loss)

# The trust-window case: the store stops answering while threads and children
# work, and the operator has external work to stop. ttl 3 s: heartbeat 1 s,
# margin 0.6 s, grace 0.15 s.
with DAG(dag_id="lf_blackout", schedule=None, start_date=START,
         default_args={"retries": 0}) as lf_blackout:
    StopsExternalWork(task_id="job", python_callable=threads_and_child, lease_ttl=3.0)
