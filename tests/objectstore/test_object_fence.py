"""ObjectFence on moto's S3 server (its own process): a token's output is
published all or nothing, an older token never replaces a newer one, an
equal token commits again, and the writer recognises its own commit when an
answer is lost. Bad input is refused before anything is written."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from objectstore_helpers import object_names

from lease_integrations.core.errors import ConfigurationError, StaleToken
from lease_integrations.core.fencing import FencedOutput, ObjectFence


def test_commit_then_read_returns_the_token_and_every_file(s3_url: str) -> None:
    fence = ObjectFence(s3_url + "/exports/billing")
    assert fence.read() is None
    fence.commit(7, {"part-0.csv": b"a,b\n", "nested/part-1.csv": io.BytesIO(b"c,d\n"),
                     "part-2.csv": bytearray(b"e")})
    assert fence.read() == FencedOutput(7, {"part-0.csv": b"a,b\n", "nested/part-1.csv": b"c,d\n",
                                            "part-2.csv": b"e"})
    # A second fence object on the same URL (another process, another day) reads the same.
    assert ObjectFence(s3_url + "/exports/billing/").read() == fence.read()


def test_a_newer_token_replaces_the_output_whole(s3_url: str) -> None:
    fence = ObjectFence(s3_url)
    fence.commit(1, {"a.csv": b"old", "b.csv": b"old"})
    fence.commit(2, {"a.csv": b"new"})
    assert fence.read() == FencedOutput(2, {"a.csv": b"new"})
    # The replaced output's objects are deleted; only the current commit's remain.
    staged = [n for n in object_names(s3_url) if "/_fence/" in n and not n.endswith("manifest.json")]
    assert len(staged) == 1 and staged[0].endswith("/a.csv"), staged


def test_an_older_token_is_refused_and_writes_nothing(s3_url: str) -> None:
    fence = ObjectFence(s3_url)
    fence.commit(5, {"a.csv": b"five"})
    before = object_names(s3_url)
    with pytest.raises(StaleToken) as refused:
        fence.commit(4, {"a.csv": b"four", "b.csv": b"four"})
    assert refused.value.token == 4 and refused.value.newest == 5
    assert fence.read() == FencedOutput(5, {"a.csv": b"five"})
    assert object_names(s3_url) == before


def test_an_equal_token_commits_again(s3_url: str) -> None:
    fence = ObjectFence(s3_url)
    fence.commit(3, {"a.csv": b"first"})
    fence.commit(3, {"a.csv": b"second", "b.csv": b"more"})
    assert fence.read() == FencedOutput(3, {"a.csv": b"second", "b.csv": b"more"})


@pytest.mark.parametrize("token", [0, -1, True, 1.5, "7", None])
def test_a_bad_token_is_refused_before_any_write(s3_url: str, token: Any) -> None:
    with pytest.raises(ConfigurationError, match="positive integer"):
        ObjectFence(s3_url).commit(token, {"a.csv": b"x"})
    assert object_names(s3_url) == []


@pytest.mark.parametrize("files", [
    {}, {"../escape.csv": b"x"}, {"/abs.csv": b"x"}, {"a//b.csv": b"x"}, {"a/./b": b"x"},
    {"ok.csv": "text, not bytes"}, {"ok.csv": 42}, {"bad\nname": b"x"}, [("a.csv", b"x")],
])
def test_bad_files_are_refused_before_any_write(s3_url: str, files: Any) -> None:
    with pytest.raises(ConfigurationError):
        ObjectFence(s3_url).commit(1, files)
    assert object_names(s3_url) == []


@pytest.mark.parametrize("url, says", [
    ("s3://AKIAEXAMPLE:hunter2-secret@bucket/prefix", "carries credentials"),
    ("s3://bucket/prefix?endpoint=http://x&secret_key=hunter2-secret", "take no"),
    ("s3://b/prefix", "not an S3 bucket name"),
    ("s3://bucket/a/../b", "prefix"),
    ("http://bucket/prefix", "s3://"),
    ("gs://bucket/prefix", "gs:// is not supported"),
    ("bucket/prefix", "s3://bucket/prefix"),
])
def test_a_bad_url_is_refused_naming_the_problem_never_the_secret(url: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        ObjectFence(url)
    assert says in str(refused.value)
    assert "hunter2" not in str(refused.value)


def test_commits_of_many_processes_never_let_an_older_token_win(s3_url: str, tmp_path: Any) -> None:
    """Six writer processes, tokens 1 to 6, commit in a loop at once: every
    accepted commit's token is at least every token accepted before it
    (the manifest only moves forward), and the last output is whole."""
    import subprocess
    import sys
    from pathlib import Path

    worker = Path(__file__).with_name("fence_worker.py")
    outs = [tmp_path / f"w{token}.jsonl" for token in range(1, 7)]
    procs = [subprocess.Popen([sys.executable, str(worker), "loop", s3_url, str(token), str(out),
                               "8"]) for token, out in zip(range(1, 7), outs)]
    assert [p.wait(timeout=240) for p in procs] == [0] * 6
    rows = [json.loads(line) for out in outs for line in out.read_text().splitlines()]
    accepted = [r for r in rows if r["result"] == "ok"]
    stale = [r for r in rows if r["result"] == "stale"]
    assert accepted and len(rows) == 6 * 8
    final = ObjectFence(s3_url).read()
    assert final is not None and final.token == max(r["token"] for r in accepted)
    assert final.files == {"part-0.csv": f"token {final.token}".encode(),
                           "part-1.csv": f"token {final.token}".encode()}
    for r in stale:  # refused only after a newer token was accepted
        assert r["newest"] > r["token"]
        assert any(a["token"] == r["newest"] for a in accepted)


def test_a_lost_answer_is_recognised_as_the_writers_own_commit(
    s3_proxy_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest write lands but its answer is lost (the connection drops):
    the writer re-reads, finds its own commit id, and reports success, once."""
    proxy, url = s3_proxy_factory()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    fence = ObjectFence(url)
    fence.commit(1, {"a.csv": b"one"})
    rule = proxy.add("PUT", "_fence/manifest.json", "lose")
    fence.commit(2, {"a.csv": b"two"})
    assert rule.matched == 1
    # The lost write, then boto3's own retry of it (refused: the manifest has
    # changed, by that very write); no third write publishing the output again.
    puts = [p for m, p in proxy.seen if m == "PUT" and "_fence/manifest.json" in p]
    assert len(puts) == 3, puts  # the first commit's, the lost one, boto3's retry
    assert fence.read() == FencedOutput(2, {"a.csv": b"two"})


def test_a_409_conflict_is_retried_not_taken_for_fenced(
    s3_proxy_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, url = s3_proxy_factory()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    fence = ObjectFence(url)
    rule = proxy.add("PUT", "_fence/manifest.json", "conflict", times=3)
    fence.commit(4, {"a.csv": b"four"})
    assert rule.matched == 3
    puts = [p for m, p in proxy.seen if m == "PUT" and "_fence/manifest.json" in p]
    assert len(puts) == 4  # three answered 409, the fourth landed
    assert fence.read() == FencedOutput(4, {"a.csv": b"four"})


def test_object_names_helper_sees_boto3(s3_url: str) -> None:
    """The tests' own view of the bucket goes around the code under test."""
    bucket, _, prefix = s3_url[len("s3://"):].partition("/")
    boto3.session.Session().client("s3").put_object(Bucket=bucket, Key=f"{prefix}/x", Body=b"1")
    assert object_names(s3_url) == [f"{prefix}/x"]
