"""Issue 32, finding 4, through a real Prefect server. Prefect checks a
block made in its UI against the block's JSON schema, on the server
(``POST /ui/schemas/validate``), and never runs the block's Python
validators; its API (``create_block_document``) stores the data without
checking it at all (Prefect 3.9.1). So: the schema's ``pattern`` makes the
UI refuse a password in the plain ``url`` field, and ``load()`` refuses a
block stored with one (through the API, or by an older version), asking to
re-save it, and so does ``leasectl --prefect-block``. Also the URL-typo
fuzz of finding 3 on the block: no typo leaves a piece of its password in
the block's url, repr or error."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import uuid
from typing import Any

import httpx
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import BlockDocumentCreate
from pydantic import ValidationError
from security.url_typos import typos
from servers.redis_server import free_port

from lease_integrations import LeaseError
from lease_integrations.prefect.block import LeaseStoreBlock

PASSWORD = "Zq8rTw3Lmk"
WITH_PASSWORD = (f"redis://u:{PASSWORD}@cache:6379/0", f"redis+cluster://:{PASSWORD}@c1:7000,c2:7001",
                 f"postgresql://jobs:{PASSWORD}@db/leases", f"mongodb://u:{PASSWORD}@h1:1,h2:2/db")


async def _registered() -> tuple[Any, Any]:
    """The block type and the schema Prefect's server holds for it."""
    await LeaseStoreBlock.aregister_type_and_schema()
    async with get_client() as client:
        block_type = await client.read_block_type_by_slug(LeaseStoreBlock.get_block_type_slug())
        checksum = LeaseStoreBlock._to_block_schema(block_type_id=block_type.id).checksum
        return block_type, await client.read_block_schema_by_checksum(checksum)


async def _create(name: str, url: str) -> Any:
    """A block document made through the API, as a script or Terraform makes one."""
    block_type, schema = await _registered()
    async with get_client() as client:
        return await client.create_block_document(BlockDocumentCreate(
            name=name, data={"url": url}, block_schema_id=schema.id, block_type_id=block_type.id))


def test_prefects_ui_validation_refuses_a_password_in_the_url(prefect_api: str) -> None:
    _, schema = asyncio.run(_registered())

    def errors(url: str) -> Any:
        r = httpx.post(f"{prefect_api}/ui/schemas/validate", timeout=30,
                       json={"schema": schema.fields, "values": {"url": url}})
        assert r.status_code == 200, r.text
        return r.json()

    for url in WITH_PASSWORD:
        answer = errors(url)
        assert answer["valid"] is False and "url" in str(answer["errors"]), (url, answer)
    for url in ("redis://u@cache:6379/0", "redis+cluster://c1:7000,c2:7001", "sqlite:///var/l.db"):
        assert errors(url)["valid"] is True, url
    description = schema.fields["properties"]["url"]["description"]
    assert "password field" in description and "is moved" not in description


def test_a_stored_block_with_a_password_in_its_url_is_refused_on_load(
        prefect_api: str, tmp_path: Any) -> None:
    stored = {f"userinfo-{uuid.uuid4().hex[:8]}": f"redis://u:{PASSWORD}@127.0.0.1:{free_port()}/0",
              f"query-{uuid.uuid4().hex[:8]}": f"sqlite://{tmp_path}/leases.db?token={PASSWORD}"}
    for name, url in stored.items():
        asyncio.run(_create(name, url))  # the API stores it unchecked
        try:
            LeaseStoreBlock.load(name)
        except LeaseError as exc:
            assert "re-save it with the password in the password field" in str(exc)
            assert PASSWORD not in str(exc)
        else:
            raise AssertionError(f"load() accepted block {name!r} with a password in its url")
        done = subprocess.run([sys.executable, "-m", "lease_integrations.cli", "--prefect-block",
                               name, "list"], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PREFECT_API_URL": prefect_api})
        assert done.returncode == 2 and "re-save it" in done.stderr, (done.returncode, done.stderr)
        assert PASSWORD not in done.stdout + done.stderr
    clean = f"clean-{uuid.uuid4().hex[:8]}"
    asyncio.run(_create(clean, f"sqlite://{tmp_path}/leases.db"))
    assert LeaseStoreBlock.load(clean).url == f"sqlite://{tmp_path}/leases.db"


def test_no_url_typo_leaves_its_password_in_the_block() -> None:
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    found = []
    for typo in typos(random.Random(seed), free_port):
        try:
            block = LeaseStoreBlock(url=typo.url)
        except (ValidationError, LeaseError) as exc:
            said = [str(exc), repr(exc)]
        else:
            said = [block.url, repr(block), str(block), block.model_dump_json()]
        if typo.leaks(*said):
            found.append((typo.name, typo.leaks(*said), next(t for t in said if typo.leaks(t))))
    assert not found, f"seed={seed}:\n" + "\n".join(map(repr, found))
