"""``LeaseStoreBlock``: the lease store's URL kept in Prefect, its password
as a ``SecretStr`` (hidden in the UI and API), so flows name a block instead
of carrying credentials: ``store="block:leases"`` or
``store=LeaseStoreBlock.load("leases")``.

Registered with Prefect through the ``prefect.collections`` entry point, or
by hand with ``prefect block register -m lease_integrations.prefect.block``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote, urlsplit

from prefect.blocks.core import Block
from pydantic import ConfigDict, Field, SecretStr, field_validator, model_validator

from lease_integrations import ConfigurationError, LeaseStore, check_url, connect
from lease_integrations.core.config import check_credentials
from lease_integrations.core.redact import is_secret_name, query_pieces, split_credentials

#: A URL with no ``user:password@`` part: no ``@`` at all, or a user name
#: without ``:`` (nor ``/ ? #``) before the only ``@``. Plain syntax that
#: Prefect's server (Python ``re``, through ``jsonschema``) and pydantic
#: (Rust ``regex``) read alike: no look-around.
URL_WITHOUT_PASSWORD = r"^([^@]*|[A-Za-z][A-Za-z0-9+.\-]*://[^:@/?#]*@[^@]*)$"


class LeaseStoreBlock(Block):  # type: ignore[misc]  # Block is untyped for mypy
    """Where a flow's leases live: a store URL and its password."""

    _block_type_name = "Lease Store"
    _block_type_slug = "lease-store"
    _description = (
        "The store that keeps lease locks for @leased_flow (lease_integrations): "
        "a URL such as redis://host:6379/0 or postgresql://user@host/db, "
        "with the password kept secret."
    )

    url: str = Field(
        description="Store URL without its password, e.g. postgresql://leases@db:5432/jobs. "
        "Put the password in the password field: a URL with user:password@ in it is refused.",
        # Checked by Prefect's server too (it validates documents against the
        # JSON schema alone, not by running the validators below): a block made
        # in the UI or through the API cannot keep a password in this plain field.
        pattern=URL_WITHOUT_PASSWORD,
    )
    password: SecretStr | None = Field(
        default=None, description="The store's password, if it needs one."
    )
    # A validation error must not echo the pasted URL (password included).
    model_config = ConfigDict(hide_input_in_errors=True)

    @model_validator(mode="before")  # type: ignore[untyped-decorator]
    @classmethod
    def _move_password_out_of_url(cls, data: Any) -> Any:
        """Keep the plain ``url`` field free of secrets, whatever the user pasted.

        The user-info is found the way ``mask_url`` finds it (up to the last
        ``@``), not by ``urlsplit``: that one cannot read a multi-host URL's
        port list, and a raw ``/`` in the password would end its netloc early
        and leave the password in ``url``. A raw ``/ ? # @`` is refused,
        asking for percent-encoding, before anything is split."""
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            return data
        url = data["url"].strip()
        check_credentials(url)
        head, user, password, rest = _split(url)
        if password is None:
            return data
        data = dict(data)
        if data.get("password") in (None, ""):
            data["password"] = SecretStr(unquote(password))
        data["url"] = _join(head, user, None, rest)
        return data

    @field_validator("url")  # type: ignore[untyped-decorator]
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        checked = check_url(url)
        names = [n for n, _, _ in (p.partition("=") for p in urlsplit(checked).query.split("&"))
                 if n and is_secret_name(n)]
        if names:  # the plain url field is shown in Prefect's UI and API
            raise ConfigurationError(
                f"store URL option {names[0]!r} looks like a secret: put the password in the "
                "block's password field, not in the URL")
        return checked

    @classmethod
    def _from_block_document(cls, block_document: Any) -> LeaseStoreBlock:
        """Refuse a stored block whose plain ``url`` holds a password (saved
        through the API or UI before the schema refused it, or by an older
        version): anyone who may read blocks reads it. Moving it out in
        memory, as constructing a block does, would leave it stored in the clear."""
        url = (block_document.data or {}).get("url")
        if isinstance(url, str) and _holds_a_secret(url):
            raise ConfigurationError(
                f"Lease Store block {block_document.name!r} keeps a password in its plain url "
                "field, which Prefect shows to anyone who may read blocks: re-save it with the "
                "password in the password field (LeaseStoreBlock(url='scheme://user@host/...', "
                f"password=...).save({block_document.name!r}, overwrite=True)) and change that "
                "password, since it was stored in the clear")
        block: LeaseStoreBlock = super()._from_block_document(block_document)
        return block

    def get_url(self) -> str:
        """The full URL with the password put back: for ``connect`` only, never log it."""
        if self.password is None:
            return self.url
        head, user, _, rest = _split(self.url)
        return _join(head, user, quote(self.password.get_secret_value(), safe=""), rest)

    def connect(self) -> LeaseStore:
        return connect(self.get_url())


def _split(url: str) -> tuple[str, str | None, str | None, str]:
    """``scheme://``, the user (as written), the password (as written) and
    everything after the ``@``; user and password are None when absent."""
    head, sep, after = url.partition("://")
    if not sep:
        return url, None, None, ""
    userinfo, rest = split_credentials(after)
    if userinfo is None:
        return head + sep, None, None, rest
    user, colon, password = userinfo.partition(":")
    return head + sep, user, password if colon else None, rest


def _join(head: str, user: str | None, password: str | None, rest: str) -> str:
    """The inverse of ``_split``, with ``password`` already percent-encoded."""
    auth = user or ""
    if password is not None:
        auth += ":" + password
    return head + (f"{auth}@" if auth else "") + rest


def _holds_a_secret(url: str) -> bool:
    """A password in the user-info, or a secret-named query option."""
    _, _, password, rest = _split(url.strip())
    query = rest.partition("?")[2]
    return password is not None or any(o.secret for o in query_pieces(query))
