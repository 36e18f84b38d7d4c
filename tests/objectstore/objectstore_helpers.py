"""What the object-store tests look at around the code under test: the
bucket's objects, listed with boto3 itself."""

from __future__ import annotations

import boto3


def split(url: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix)."""
    bucket, _, prefix = url[len("s3://"):].partition("/")
    return bucket, prefix.strip("/")


def object_names(url: str) -> list[str]:
    """Every object under the URL's prefix, sorted (the probe's scratch
    objects excluded: it deletes them, and they are never output)."""
    bucket, prefix = split(url)
    client = boto3.session.Session().client("s3")
    names: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        names.extend(item["Key"] for item in page.get("Contents", ()))
    return sorted(n for n in names if "/_probe/" not in n)
