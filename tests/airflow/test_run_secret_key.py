"""The DAG-run lease's secret key (issue 24, item 1): an unset, placeholder
or too-short key fails with a ConfigurationError naming the setting, and the
message never carries the key. Each case runs in a fresh process with its own
AIRFLOW_HOME (Airflow reads its configuration once, at import); the Task
SDK's ``conf`` there returns the unexpanded text ``{FERNET_KEY}`` for an
unset fernet key, the constant the lease used to accept."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from harness import AIRFLOW_2

PROBE = """
import json
from lease_integrations import ConfigurationError
from lease_integrations.airflow.run_lease import run_secret
try:
    print(json.dumps({"secret": run_secret("k", "dag", "run", "nonce")}))
except ConfigurationError as exc:
    print(json.dumps({"error": str(exc)}))
"""
RUN_KEY = "AIRFLOW__LEASE_INTEGRATIONS__RUN_SECRET_KEY"
FERNET = "AIRFLOW__CORE__FERNET_KEY"


def derive(tmp_path: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), **settings)
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_nothing_set_is_refused_naming_both_settings(tmp_path: Path) -> None:
    error = derive(tmp_path).get("error", "")
    assert "[core] fernet_key" in error
    if not AIRFLOW_2:  # Airflow 2.11's conf returns '' for it, no placeholder to refuse
        assert "'{FERNET_KEY}'" in error
    assert "[lease_integrations] run_secret_key" in error and RUN_KEY in error


@pytest.mark.parametrize("value, problem", [
    ("{FERNET_KEY}", "unexpanded placeholder"),
    ("{RUN_SECRET_KEY}", "unexpanded placeholder"),
    ("sh0rt-but-s3cret", "16 characters long"),
    ("   ", "0 characters long"),
])
def test_a_bad_run_secret_key_is_refused_even_beside_a_good_fernet_key(
        tmp_path: Path, value: str, problem: str) -> None:
    result = derive(tmp_path, **{RUN_KEY: value, FERNET: secrets.token_urlsafe(32)})
    error = result.get("error", "")
    assert f"[lease_integrations] run_secret_key ({RUN_KEY}) " in error and problem in error, result
    if "placeholder" not in problem and value.strip():
        assert value.strip() not in error  # the key itself is never printed


def test_a_short_fernet_key_is_refused_naming_it(tmp_path: Path) -> None:
    short = "x9" * 10
    error = derive(tmp_path, **{FERNET: short}).get("error", "")
    assert f"[core] fernet_key ({FERNET}) is 20 characters long" in error
    assert short not in error and "run_secret_key" in error


def test_good_keys_derive_a_secret_that_depends_on_the_key(tmp_path: Path) -> None:
    one, two = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    by_run_key = derive(tmp_path, **{RUN_KEY: one, FERNET: two})["secret"]
    assert derive(tmp_path, **{RUN_KEY: one})["secret"] == by_run_key
    by_fernet = derive(tmp_path, **{FERNET: two})["secret"]
    assert len(by_run_key) == 32 and by_fernet != by_run_key
