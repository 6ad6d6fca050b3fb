"""Google's Pub/Sub emulator for the tests: the jar of google-cloud-cli's
``pubsub-emulator`` component, started with ``java -jar`` on a free port of
127.0.0.1 (so this process owns the Java process: stopping ``gcloud beta
emulators pubsub start`` would leave it running), and the clients pointed at
it through ``PUBSUB_EMULATOR_HOST``.

Debian: ``apt-get install google-cloud-cli google-cloud-cli-pubsub-emulator
openjdk-17-jre-headless`` (Google's apt repository).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.mediawiki import free_port

MISSING = (
    "the Pub/Sub emulator needs gcloud's pubsub-emulator component and Java: apt-get install "
    "google-cloud-cli-pubsub-emulator openjdk-17-jre-headless"
)
PROJECT = "ragsync-test"
"""The emulator's project (any name of 6-30 characters: Beam's Pub/Sub paths check the length)."""


def emulator_jar() -> Path | None:
    """The emulator's jar under the Cloud SDK that ``gcloud`` belongs to, or None."""
    gcloud = shutil.which("gcloud")
    roots = [Path(os.path.realpath(gcloud)).parents[1]] if gcloud else []
    roots.append(Path("/usr/lib/google-cloud-sdk"))
    for root in roots:
        jars = sorted(glob.glob(str(root / "platform/pubsub-emulator/lib/cloud-pubsub-emulator-*-all.jar")))
        if jars:
            return Path(jars[-1])
    return None


def available() -> bool:
    """Whether the emulator can start here (its jar and ``java``)."""
    return emulator_jar() is not None and shutil.which("java") is not None


@dataclass
class PubSubEmulator:
    """A running emulator: ``host`` is the value of ``PUBSUB_EMULATOR_HOST``."""

    host: str
    process: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, folder: Path, timeout_s: float = 120.0) -> PubSubEmulator:
        """Start the jar on a free port; return once it listens.

        Raises:
            RuntimeError: it exited or did not listen within ``timeout_s``.
        """
        jar = emulator_jar()
        java = shutil.which("java")
        assert jar is not None and java is not None, MISSING
        folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        log = folder / "pubsub-emulator.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                [java, "-jar", str(jar), "--host=127.0.0.1", f"--port={port}"],
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        emulator = cls(f"127.0.0.1:{port}", proc, log)
        deadline = time.monotonic() + timeout_s
        while "Server started, listening on" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                emulator.stop()
                raise RuntimeError(f"the Pub/Sub emulator did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)
        return emulator

    def stop(self) -> None:
        """End the Java process (and wait for it)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def env(self) -> dict[str, str]:
        """What a client process needs to reach this emulator."""
        return {"PUBSUB_EMULATOR_HOST": self.host}

    def clients(self) -> tuple[Any, Any]:
        """A (publisher, subscriber) pair bound to this emulator."""
        os.environ["PUBSUB_EMULATOR_HOST"] = self.host
        from google.cloud import pubsub_v1

        return pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()

    def subscription(self, name: str) -> tuple[str, str]:
        """Create topic and subscription ``name`` (ack deadline 600 s, the
        longest: a test's run never sees a message redelivered);
        returns (topic path, subscription path)."""
        publisher, subscriber = self.clients()
        topic = f"projects/{PROJECT}/topics/{name}"
        sub = f"projects/{PROJECT}/subscriptions/{name}"
        publisher.create_topic(name=topic)
        subscriber.create_subscription(name=sub, topic=topic, ack_deadline_seconds=600)
        return topic, sub

    def publish(self, topic: str, messages: list[bytes]) -> list[str]:
        """Publish each body in order; returns their message ids."""
        publisher, _ = self.clients()
        return [publisher.publish(topic, body).result(timeout=30) for body in messages]

    def waiting(self, subscription: str) -> int:
        """Messages still waiting in ``subscription`` (pulled and left
        unacknowledged: they come back after the ack deadline)."""
        _, subscriber = self.clients()
        got = subscriber.pull(request={"subscription": subscription, "max_messages": 100}, timeout=10)
        return len(got.received_messages)
