"""The GCS calls the probe makes: a write conditioned on the object's
generation (``ifGenerationMatch``; 0 means "no object yet"), a read, a delete.

Only the probe speaks GCS. The GCS emulator a package ships
(fake-gcs-server 1.54.0) honours ``ifGenerationMatch`` on multipart uploads
up to 8 MiB and ignores it on larger (resumable) uploads and on media uploads
(measured), so the probe checks both sizes; no ``gs://`` store or fence is offered (none
could be tested on a store that passes); ``leasectl probe --url
gs://bucket/prefix`` still tells whether a store (the real one, or a newer
emulator) honours the conditions. Client and credentials come the way
google-cloud-storage takes them (Application Default Credentials,
``STORAGE_EMULATOR_HOST``), imported only here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import IO, Any

from ..errors import ConfigurationError, StoreUnavailable
from ..redact import mask_url
from .s3 import Place, Refused, Stored

#: Bodies above google-cloud-storage's multipart limit (8 MiB) go up in a
#: resumable session: fake-gcs-server 1.54.0 ignores the generation there
#: (measured), and honours it on smaller uploads.
LARGE_UPLOAD = 8 * 1024 * 1024 + 1024


class GcsBucket:
    """The probe's view of one GCS bucket; the same calls as ``s3.Bucket``,
    a generation standing where S3 has an ETag."""

    def __init__(self, place: Place) -> None:
        try:
            from google.cloud import storage
        except ImportError as exc:
            raise ConfigurationError(
                f"{place.url} needs google-cloud-storage: pip install "
                f"-e '<checkout>[gcs]' (from the checkout) ({exc})") from None
        self.place = place
        self._client: Any = storage.Client()
        self._bucket: Any = self._client.bucket(place.bucket)
        host = os.environ.get("STORAGE_EMULATOR_HOST")
        self.endpoint = mask_url(host) if host else "storage.googleapis.com"

    @property
    def identity(self) -> tuple[str, str]:
        return (self.endpoint, self.place.bucket)

    def put(self, name: str, body: bytes | IO[bytes], *, if_match: str | None = None,
            if_none_match: bool = False) -> tuple[str, datetime]:
        """Upload ``body``: the client sends up to 8 MiB as one multipart
        upload, more in a resumable session."""
        blob = self._bucket.blob(name)
        generation = 0 if if_none_match else (int(if_match) if if_match is not None else None)
        data = body if isinstance(body, bytes) else body.read()
        with self._errors(name):
            blob.upload_from_string(data, if_generation_match=generation)
        return str(blob.generation), blob.updated or datetime.now(timezone.utc)

    def get(self, name: str) -> Stored | None:
        blob = self._bucket.blob(name)
        from google.api_core.exceptions import NotFound

        try:
            with self._errors(name):
                body = blob.download_as_bytes()
        except _Missing:
            return None
        except NotFound:  # pragma: no cover - _errors turns it into _Missing
            return None
        when = blob.updated or datetime.now(timezone.utc)
        return Stored(body, str(blob.generation), when, when)

    def delete(self, name: str) -> None:
        try:
            with self._errors(name):
                self._bucket.blob(name).delete()
        except _Missing:
            pass

    @contextmanager
    def _errors(self, name: str) -> Iterator[None]:
        from google.api_core import exceptions as gexc

        try:
            yield
        except gexc.NotFound:
            raise _Missing() from None
        except (gexc.PreconditionFailed, gexc.Conflict) as exc:
            raise Refused(int(exc.code or 412), "ifGenerationMatch") from None
        except gexc.GoogleAPIError as exc:
            raise StoreUnavailable(f"GCS said {type(exc).__name__} for {self.place.url} "
                                   f"({name}) at {self.endpoint}: {exc}") from None
        except OSError as exc:
            raise StoreUnavailable(f"GCS could not be reached for {self.place.url} at "
                                   f"{self.endpoint}: {exc}") from None


class _Missing(Exception):
    """A 404 inside ``_errors``: no such object."""
