"""The README's Airflow quickstart runs as written on every Airflow this
suite runs on (3.x and 2.11): on 2.11 ``from airflow.sdk import task``
failed to import (issue 40)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def quickstart() -> str:
    text = README.read_text()
    section = text[text.index("## Quickstart: Airflow"):]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "no python block under 'Quickstart: Airflow'"
    return found.group(1)


def test_the_readme_quickstart_defines_its_task() -> None:
    namespace: dict[str, object] = {}
    exec(compile(quickstart(), str(README), "exec"), namespace)
    decorated = namespace["rebuild_index"]
    assert callable(decorated) and hasattr(decorated, "function")
