"""The package as a user gets it: build the wheel and the sdist from this
checkout (hatchling, through ``uv build``), check what they carry (py.typed,
the LICENSE the metadata names, the console script and both entry points),
install the wheel into a clean virtualenv and run ``leasectl --help`` there,
then import each face from the built wheel inside the Airflow and the Prefect
test environments (a wheel of pure Python is importable as a zip).

An editable install would hide every one of these mistakes: it serves the
source tree, which has all files whatever the build includes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WAIT = 300.0  # a cold build may fetch hatchling once; never reached when all is well


def _uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        pytest.skip("uv is not installed")
    return found


def _run(*cmd: str | Path, env: dict[str, str] | None = None, cwd: Path = Path("/")) -> str:
    # Not in the checkout: ``python -c`` puts the working directory first on sys.path.
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, timeout=WAIT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = done.stdout.decode(errors="replace")
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{output[-4000:]}"
    return output


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("dist")
    _run(_uv(), "build", "--quiet", "--out-dir", out, ROOT)
    yield out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("lease_integrations-*.whl")
    return wheel


def test_wheel_carries_types_license_and_entry_points(dist: Path) -> None:
    with zipfile.ZipFile(_wheel(dist)) as whl:
        names = set(whl.namelist())
        (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        metadata = whl.read(f"{info}/METADATA").decode()
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
        license_text = whl.read(f"{info}/licenses/LICENSE").decode()
    assert "lease_integrations/py.typed" in names
    # The Leases page's templates, which both Airflow faces load from the package.
    for template in ("leases.html", "_macros.html", "flask/lease_integrations/leases_frame.html"):
        assert f"lease_integrations/airflow/ui/templates/{template}" in names, template
    assert "Apache License" in license_text and "Version 2.0" in license_text
    assert "License-Expression: Apache-2.0" in metadata
    assert "License-File: LICENSE" in metadata
    for classifier in ("Typing :: Typed", "Framework :: Apache Airflow :: Provider",
                       "Programming Language :: Python :: 3.13"):
        assert f"Classifier: {classifier}" in metadata
    assert "leasectl = lease_integrations.cli:main" in entry_points
    assert "lease_integrations.airflow.provider:get_provider_info" in entry_points
    assert "lease_integrations.prefect.block" in entry_points
    # Nothing but the package and its metadata: no tests, no virtualenvs, no caches.
    assert {n.split("/")[0] for n in names} == {"lease_integrations", info}
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_sdist_carries_license_and_types(dist: Path) -> None:
    (sdist,) = dist.glob("lease_integrations-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert {"LICENSE", "lease_integrations/py.typed", "pyproject.toml", "README.md"} <= names
    assert not [n for n in names if n.startswith(".venv")]


def test_leasectl_runs_from_a_clean_venv(dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    env.pop("PYTHONPATH", None)  # the venv must see the wheel, not this checkout
    env.pop("VIRTUAL_ENV", None)
    _run(_uv(), "venv", "--quiet", "--python", sys.executable, venv, env=env)
    _run(_uv(), "pip", "install", "--quiet", "--python", venv / "bin" / "python", _wheel(dist), env=env)
    assert "usage: leasectl" in _run(venv / "bin" / "leasectl", "--help", env=env)
    where = _run(venv / "bin" / "python", "-c",
                 "import lease_integrations, lease_integrations.core.fencing; "
                 "print(lease_integrations.__file__)", env=env)
    assert str(venv) in where


@pytest.mark.parametrize(("face", "statement"), [
    ("airflow", "from lease_integrations.airflow import LeasedPythonOperator, leased_task"),
    ("prefect", "from lease_integrations.prefect import LeaseStoreBlock, leased, leased_flow"),
])
def test_each_face_imports_from_the_wheel(dist: Path, face: str, statement: str) -> None:
    python = Path(os.environ.get(f"LEASE_TEST_{face.upper()}_PYTHON",
                                 ROOT / f".venv-{face}" / "bin" / "python"))
    if not python.exists():
        if os.environ.get("LEASE_TEST_REQUIRE_ALL"):
            pytest.fail(f"no {face} environment at {python}")
        pytest.skip(f"no {face} environment at {python}")
    wheel = _wheel(dist)
    env = {**os.environ, "PYTHONPATH": str(wheel), "PYTHONDONTWRITEBYTECODE": "1"}
    check = (f"{statement}; import lease_integrations as p; "
             f"assert p.__file__.startswith({str(wheel)!r}), p.__file__")
    _run(python, "-c", check, env=env)
