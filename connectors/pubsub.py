"""A Pub/Sub subscription relayed into the catalog's event queue (no Beam).

Beam's Pub/Sub read runs on Dataflow (and on Beam's legacy
BundleBasedDirectRunner); the runners a local ``ragsync stream`` uses
(FnApiRunner, multi-process, the portable job service) cannot run it and read
nothing. On those, ``ragsync stream --source pubsub`` runs this relay in its
own process beside a stream of the local queue: each pulled message goes
through the one admission of events (``connectors.events.admit_bus_message``,
what ``ragsync events push`` does), admitted events are queued, refused
messages become ``invalid_event`` dead letters holding their bytes, and only
then is the batch acknowledged. A crash before the acknowledgement gets the
messages again; the queue keeps an event once (its id is content-derived or
the sender's), so nothing is lost and nothing applies twice. From the queue
on, a Pub/Sub event is served like any other: lanes, leases, retries.

The client honours ``PUBSUB_EMULATOR_HOST`` (Google's emulator) and
otherwise Google's application default credentials.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from typing import Any

from connectors.events import EventAdmission, admit_bus_message
from ragsync.config import Settings, open_catalog
from ragsync.errors import ConfigurationError
from ragsync.model import DeadLetter, Event

SUBSCRIPTION = re.compile(r"^projects/[^/\s]+/subscriptions/[^/\s]+$")
_log = logging.getLogger("ragsync.pubsub")


def check_subscription_path(subscription: str) -> None:
    """Raises ConfigurationError unless ``subscription`` is a full path."""
    if not SUBSCRIPTION.match(subscription or ""):
        raise ConfigurationError(
            f"--pubsub-subscription must be projects/PROJECT/subscriptions/NAME, got {subscription!r}"
        )


def _permanent(exc: BaseException) -> bool:
    """Whether a Pub/Sub error will not pass by retrying (the subscription is
    gone, access is refused, no credentials)."""
    from google.api_core import exceptions as gexc
    from google.auth.exceptions import DefaultCredentialsError

    return isinstance(
        exc, gexc.NotFound | gexc.PermissionDenied | gexc.Unauthenticated | DefaultCredentialsError
    )


def _explained(subscription: str, exc: BaseException) -> ConfigurationError:
    """A Pub/Sub failure that needs the operator, as what to do."""
    from google.api_core import exceptions as gexc

    if isinstance(exc, gexc.NotFound):
        why = "does not exist: create it (gcloud pubsub subscriptions create) or fix the path"
    elif isinstance(exc, gexc.PermissionDenied | gexc.Unauthenticated):
        why = "refuses this identity: grant it roles/pubsub.subscriber on the subscription"
    else:
        why = "needs credentials: set GOOGLE_APPLICATION_CREDENTIALS (or PUBSUB_EMULATOR_HOST)"
    return ConfigurationError(f"Pub/Sub subscription {subscription} {why} ({type(exc).__name__})")


class PubSubRelay:
    """Pulls ``subscription`` into the event queue of ``settings``' catalog
    in a thread of its own (module docstring).

    Args:
        settings: the catalog the events are queued in.
        subscription: ``projects/P/subscriptions/S``.
        batch: messages pulled at once.
        pull_timeout_s: how long one pull waits for messages.
        show_progress: a line on stderr for every batch relayed.

    Raises:
        ConfigurationError: ``subscription`` is not a full path.
    """

    def __init__(
        self,
        settings: Settings,
        subscription: str,
        *,
        batch: int = 100,
        pull_timeout_s: float = 5.0,
        show_progress: bool = False,
    ) -> None:
        check_subscription_path(subscription)
        self.settings = settings
        self.subscription = subscription
        self.batch = batch
        self.pull_timeout_s = pull_timeout_s
        self.show_progress = show_progress
        self.failure: ConfigurationError | None = None
        self.relayed = 0
        self.dead_lettered = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: Any = None

    def _subscriber(self) -> Any:
        if self._client is None:
            from google.cloud.pubsub_v1 import SubscriberClient

            self._client = SubscriberClient()
        return self._client

    def check(self) -> None:
        """Make sure the subscription can be read, before the stream starts.

        Raises:
            ConfigurationError: it does not exist, access is refused or there
                are no credentials; the message says what to do.
        """
        try:
            self._subscriber().get_subscription(request={"subscription": self.subscription}, timeout=30)
        except Exception as exc:
            if _permanent(exc):
                raise _explained(self.subscription, exc) from None
            raise

    def relay_once(self, admission: EventAdmission, catalog: Any) -> int:
        """Pull one batch, admit each message, queue what is admitted, record
        dead letters for the rest, then acknowledge the batch.

        Returns:
            Messages relayed (0: none was waiting).
        """
        from google.api_core import exceptions as gexc

        request = {"subscription": self.subscription, "max_messages": self.batch}
        try:
            got = self._subscriber().pull(request=request, timeout=self.pull_timeout_s)
        except gexc.DeadlineExceeded:
            return 0
        received = list(got.received_messages)
        if not received:
            return 0
        events: list[Event] = []
        dead: list[DeadLetter] = []
        for item in received:
            where = f"{self.subscription}#{item.message.message_id}"
            outcome = admit_bus_message(bytes(item.message.data), admission, bus="pubsub", where=where)
            if isinstance(outcome, DeadLetter):
                dead.append(outcome)
            else:
                events.append(outcome.event)
        queued, _ = catalog.queue.enqueue_events(events) if events else (0, 0)
        for letter in dead:
            catalog.dead_letters.record_dead_letter(letter)
        # Acknowledged only once queued and recorded: a crash before this
        # gets the batch again, and the queue keeps each event once.
        acks = [item.ack_id for item in received]
        self._subscriber().acknowledge(request={"subscription": self.subscription, "ack_ids": acks})
        self.relayed += len(received)
        self.dead_lettered += len(dead)
        if self.show_progress:
            print(
                f"[pubsub] {len(received)} messages: {queued} events queued, {len(dead)} dead letters",
                file=sys.stderr,
                flush=True,
            )
        return len(received)

    def _run(self) -> None:
        """Relay until stopped; a failure that needs the operator ends the
        relay (``failure``, raised by :meth:`raise_if_failed`); any other is
        retried with a growing pause (at most 30 s)."""
        pause = 1.0
        catalog = open_catalog(self.settings)
        try:
            admission = EventAdmission(catalog)
            while not self._stop.is_set():
                try:
                    self.relay_once(admission, catalog)
                    pause = 1.0
                except Exception as exc:  # noqa: BLE001 - a relay outlives a passing failure
                    if _permanent(exc):
                        self.failure = _explained(self.subscription, exc)
                        return
                    _log.warning("Pub/Sub relay of %s: %s; retrying in %.0f s", self.subscription, exc, pause)
                    self._stop.wait(pause)
                    pause = min(pause * 2, 30.0)
        finally:
            catalog.close()

    def start(self) -> None:
        """Start relaying in a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="ragsync-pubsub-relay", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the relay to stop after its current pull."""
        self._stop.set()

    def raise_if_failed(self) -> None:
        """A watch for ``ragsync.ops.lifecycle.run_watched``.

        Raises:
            ConfigurationError: the relay stopped on a failure that needs
                the operator (the message says what to do).
        """
        if self.failure is not None:
            raise self.failure
