"""``ragsync stream --source pubsub`` as a user runs it, against Google's
Pub/Sub emulator (``tests/pubsub_emulator.py``, started on a free port).

Every event source must read what is waiting, on every runner the command
line can choose, or refuse with a clear error; and a bus event is admitted
like a pushed one (``connectors.events.EventAdmission``): an upsert without
``acl_groups`` takes its source's default groups, a message that is not an
event and an event for an unknown source or outside the source's location
become ``invalid_event`` dead letters of stage ``admit`` with their reason
(the messages and outcome are ``tests/bus_events.py``'s, the same as the
recorded Kafka records' in ``tests/test_event_sources.py``).
Before, a run without a runner argument (Beam's FnApiRunner, which cannot
run Beam's Pub/Sub read) exited 0 having read nothing, and a groupless
upsert from Pub/Sub was a ``no_permissions`` dead letter.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from ragsync.config import Settings, open_catalog
from tests.bus_events import (
    DEFAULT_GROUPS,
    EXPECTED_DEAD,
    NOTES,
    SOURCE,
    TENANT,
    assert_dead_as_expected,
    dead_letters,
    event_bodies,
    readers_of_notes,
    write_notes,
)
from tests.proc import ROOT, cli, kill_group, start_as_at_a_terminal
from tests.pubsub_emulator import PubSubEmulator

pytestmark = pytest.mark.slow
PUBSUB = ("--source", "pubsub", "--pubsub-subscription", "projects/ragsync-test/subscriptions/s")
LOOPBACK = ("--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK")


@pytest.fixture
def home_with_source(tmp_path: Path) -> tuple[Settings, Path]:
    """A home with source ``notes`` (default groups ``staff``) over a folder of three notes."""
    folder = tmp_path / "notes"
    write_notes(folder)
    home = tmp_path / "home"
    add = cli("sources", "add", SOURCE, "--tenant", TENANT, "--type", "object_store", "--uri", str(folder))
    groups = ",".join(DEFAULT_GROUPS)
    done = subprocess.run([*add, "--acl-groups", groups, "--home", str(home)], cwd=ROOT, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    return Settings(home=str(home)), folder


def _status(settings: Settings) -> tuple[dict[str, int], int, int]:
    """(documents by status, open dead letters, unfinished queued events)."""
    cat = open_catalog(settings)
    try:
        return (
            cat.documents.document_counts_by_status(),
            len(cat.dead_letters.list_dead_letters(limit=100)),
            cat.queue.unfinished_events(),
        )
    finally:
        cat.close()


@pytest.mark.parametrize(
    "runner",
    [
        pytest.param((), id="no-runner-argument"),
        pytest.param(("--runner=DirectRunner",), id="DirectRunner"),
        pytest.param(LOOPBACK, id="PortableRunner-embed-LOOPBACK"),
    ],
)
def test_stream_reads_pubsub_on_every_local_runner_and_admits_like_a_push(
    runner: tuple[str, ...],
    pubsub_emulator: PubSubEmulator,
    home_with_source: tuple[Settings, Path],
    tmp_path: Path,
) -> None:
    settings, _ = home_with_source
    topic, subscription = pubsub_emulator.subscription("events-" + uuid.uuid4().hex[:8])
    pubsub_emulator.publish(topic, event_bodies())
    cmd = cli("stream", "--source", "pubsub", "--pubsub-subscription", subscription, "--home", settings.home)
    cmd += ["--", *runner] if runner else []
    log = tmp_path / "stream.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1", **pubsub_emulator.env())
    proc = start_as_at_a_terminal(cmd, env, log)
    try:
        # A long-running stream, as an operator runs it: wait for the outcome,
        # then Ctrl-C. (The bound only catches a run that never gets there.)
        deadline = time.monotonic() + 900
        while _status(settings) != ({"indexed": 3}, 3, 0):
            assert proc.poll() is None, f"the stream ended early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{_status(settings)}\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, log.read_text()[-3000:]
    finally:
        kill_group(proc.pid)
    assert_dead_as_expected(dead_letters(settings), EXPECTED_DEAD)
    # The source's default groups were applied: staff reads every note, others none.
    assert readers_of_notes(settings) == {name: ["staff"] for name in NOTES}
    cat = open_catalog(settings)
    try:
        assert cat.queue_views.queue_stats()["by_state"] == {"done": 3}
    finally:
        cat.close()
    assert pubsub_emulator.waiting(subscription) == 0  # every message was acknowledged
    assert "Traceback" not in log.read_text(errors="replace")


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            [*PUBSUB, "--", "--runner=BundleBasedDirectRunner"],
            "BundleBasedDirectRunner cannot run",
        ),
        (
            ["--source", "kafka", "--kafka-topic", "events", "--kafka-bootstrap", "127.0.0.1:9"],
            "Kafka is read by Beam's cross-language ReadFromKafka",
        ),
        (
            [*PUBSUB, "--until-idle"],
            "--until-idle applies to --source queue",
        ),
        (["--source", "pubsub", "--pubsub-subscription", "events"], "projects/PROJECT/subscriptions/NAME"),
        (["--until-idle", "--", "--runner=BundleBasedDirectRunner"], "BundleBasedDirectRunner cannot run"),
    ],
)  # fmt: skip
def test_a_source_a_runner_cannot_read_is_refused_with_what_to_use(
    args: list[str], reason: str, tmp_path: Path
) -> None:
    """Refused before any store is opened or pipeline built: exit 2, the reason
    and what to use instead, no traceback."""
    done = subprocess.run(
        cli("stream", "--home", str(tmp_path / "home"), *args),
        cwd=ROOT,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert reason in done.stderr and "configuration error" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "home" / "milvus.db").exists()


def test_a_missing_subscription_is_refused_before_the_stream_starts(
    pubsub_emulator: PubSubEmulator, tmp_path: Path
) -> None:
    done = subprocess.run(
        cli(
            "stream",
            "--source",
            "pubsub",
            "--pubsub-subscription",
            "projects/ragsync-test/subscriptions/never-created",
            "--home",
            str(tmp_path / "home"),
        ),
        cwd=ROOT,
        env=dict(os.environ, HF_HUB_OFFLINE="1", **pubsub_emulator.env()),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "projects/ragsync-test/subscriptions/never-created" in done.stderr
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr
