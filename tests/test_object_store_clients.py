"""Beam's S3 file system builds a new boto3 session for every call (each
match, open, exists, size), and each new session reloads botocore's endpoint
data: most of an s3:// backfill went there. ``transforms.io.share_s3_clients``
gives every call with the same options one boto3 client per process; these
tests count the sessions and clients made against moto's S3 server."""

from __future__ import annotations

from typing import Any

import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from tests.object_store import s3_store
from transforms import io


def _count_sessions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    import boto3

    made = [0]
    real = boto3.session.Session

    def counting(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(boto3.session, "Session", counting)
    monkeypatch.setattr(io, "_S3_CLIENTS", {})
    monkeypatch.setattr(io._SharedBoto3Session, "_session", None)
    return made


def test_beam_s3_calls_share_one_client_per_options(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _count_sessions(monkeypatch)
    with s3_store() as store:
        for key in ("a.txt", "b.txt", "c.txt"):
            store.put(key, f"text of {key}")
        FileSystems.set_options(PipelineOptions(store.args))
        fs = io.BeamFileSystem()
        listed = sorted(info.path for info in fs.match(store.uri("*")))
        texts = [io.read_bytes(path) for path in listed]
        assert listed == [store.uri("a.txt"), store.uri("b.txt"), store.uri("c.txt")]
        assert texts == [b"text of a.txt", b"text of b.txt", b"text of c.txt"]
        assert io.write_bytes_once(store.uri("d.txt"), b"d") is True
        assert io.delete_if_exists(store.uri("d.txt")) is True
        # One match, three reads, a write, a delete: one session, one client.
        assert made[0] == 1
        assert len(io._S3_CLIENTS) == 1
        # Other options (another region) get their own client.
        region = "--s3_region_name=eu-west-1"
        other = [region if a.startswith("--s3_region_name") else a for a in store.args]
        FileSystems.set_options(PipelineOptions(other))
        assert io.read_bytes(store.uri("a.txt")) == b"text of a.txt"
        assert (made[0], len(io._S3_CLIENTS)) == (1, 2)
