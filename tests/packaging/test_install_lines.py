"""Every install line the project shows installs this package from a path
(the checkout, or a wheel built from it), never by name from an index
(issue 40, finding 9). The package is published on no index: a line that
asks one for ``lease_integrations[airflow]`` fails today, and would install
whatever someone who registers that name uploads. The docs, the README,
the examples and the package's own error messages are read here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: An install command and what follows it on its line (up to a closing backtick).
INSTALL = re.compile(r"\b(?:pip3?\s+install|uv\s+pip\s+install|uv\s+add|pipx\s+install)\b([^`\n]*)")
#: A requirement naming this package (any spelling, extras, version), not a path.
BY_NAME = re.compile(r"^lease[-_.]?integrations(\[[^\]]*\])?([<>=!~;@ ].*)?$", re.IGNORECASE)


def sources() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder in ("lease_integrations", "example_dags", "example_flows", "scripts"):
        found += sorted((ROOT / folder).rglob("*.py"))
    found += [ROOT / "run", *sorted((ROOT / "scripts").glob("*.sh"))]
    return [p for p in found if p.is_file()]


def install_lines(text: str) -> list[tuple[int, str]]:
    """(line number, the command's arguments), backslash continuations joined."""
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines, 1):
        for match in INSTALL.finditer(line):
            args, more = match.group(1), number
            while args.rstrip().endswith("\\") and more < len(lines):
                args = args.rstrip()[:-1] + " " + lines[more]
                more += 1
            found.append((number, args))
    return found


def words(args: str) -> list[str]:
    cleaned = args.split("#")[0] if " #" in args else args
    try:
        return shlex.split(cleaned)
    except ValueError:  # an unclosed quote inside a Python string
        return [w.strip("'\"") for w in cleaned.split()]


def by_name(args: str) -> list[str]:
    return [w for w in words(args) if BY_NAME.match(w.strip("'\"").rstrip(",.;:)'\""))]


def test_the_check_tells_a_name_from_a_path() -> None:
    assert by_name(" 'apache-airflow==2.11.2' 'lease_integrations[airflow]' \\")
    assert by_name(" lease-integrations==0.1") and by_name(" -U lease_integrations")
    assert not by_name(" -e '.[airflow]'") and not by_name(" '/path/to/lease_integrations[redis]'")
    assert not by_name(" dist/lease_integrations-0.1-py3-none-any.whl")
    assert by_name(" 'lease_integrations[airflow]'): {exc}\") from None")


def test_no_install_line_asks_an_index_for_this_package() -> None:
    offending = []
    for path in sources():
        text = path.read_text(errors="replace")
        if path.suffix == ".py":  # a message split over implicitly joined string literals
            text = re.sub(r"([\"'])\s*\n\s*[rbf]*\1", "", text)
        for number, args in install_lines(text):
            if by_name(args):
                offending.append(f"{path.relative_to(ROOT)}:{number}: {args.strip()}")
    assert not offending, "install lines that name the package from an index (install from " \
                          "the checkout or a built wheel, by path):\n" + "\n".join(offending)
