"""The worker that runs what the control plane accepts.

``ragsync serve`` starts one in a thread (``--workers 0`` turns it off);
``ragsync worker`` runs the same loop in the foreground, for deployments that
keep the API and the work apart. Each pass:

1. **schedules**: every source that syncs by ``poll`` or ``webhook`` gets a
   full listing once a day and polled sources an incremental sync every
   ``poll_interval_s`` (``ragsync.decisions.due_syncs``: paused sources, sources
   with a sync pending and sources a rate limit asked to wait are skipped);
2. **runs one sync request** (``queued -> running -> succeeded | failed``):
   ``ragsync sync SOURCE_ID --json`` in a child process, whose counts or
   error are recorded on the request;
3. **runs one backfill request** (``POST /v1/backfills``): an
   ``embedding_model`` backfill re-embeds into a new index version with
   ``ragsync reembed --model TARGET_INDEX`` (built, not flipped: flipping needs
   a golden set, ``ragsync index-versions flip``);
4. **applies the queued events** that are due (``POST /internal/events``,
   ``ragsync events push``): ``ragsync stream --until-idle`` in a child, so
   what the API accepted is applied without a separate ``ragsync stream``.

Work runs in child processes, one at a time: a pipeline that crashes takes
nothing of the API with it, and the embedded stores (Milvus Lite, tantivy)
allow one writer process. A run left ``running`` by a worker that died is
marked failed when the next worker starts.

No Beam here (the control plane never imports it): the children do the work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ragsync.catalog import BackfillRow, Catalog, SyncRun
from ragsync.decisions import SourceSchedule, due_syncs

DEFAULT_POLL_S = 2.0
DEFAULT_TIMEOUT_S = 6 * 3600.0


def _last_json(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object (the child's ``--json`` output)."""
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _tail(text: str, limit: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


class Worker:
    """Runs sync and backfill requests of one catalog.

    Args:
        catalog: the catalog (shared with the API in ``serve``).
        store_args: the store flags the children get (``--home``,
            ``--catalog-url``, ``--milvus-uri``, ``--es-url``).
        schedule: request scheduled syncs (polls and the daily full listing).
        full_every_s: how often each source gets a full listing.
        poll_s: how long an idle worker sleeps between passes.
        timeout_s: longest one child may run.
        command: how a child ragsync is started (default: this Python, the CLI module).
    """

    def __init__(
        self,
        catalog: Catalog,
        store_args: Sequence[str],
        *,
        schedule: bool = True,
        full_every_s: float = 86_400.0,
        poll_s: float = DEFAULT_POLL_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        command: Sequence[str] = (sys.executable, "-m", "beam_pipelines.cli"),
    ) -> None:
        if poll_s <= 0 or timeout_s <= 0 or full_every_s <= 0:
            raise ValueError("poll_s, timeout_s and full_every_s must be positive")
        self.catalog = catalog
        self.store_args = list(store_args)
        self.schedule = schedule
        self.full_every_s = full_every_s
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.command = list(command)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one pass -----------------------------------------------------------------------

    def schedule_due(self, now: float | None = None) -> list[str]:
        """Request the syncs that are due; returns their sync ids."""
        busy = self.catalog.pending_sync_sources()
        states = self.catalog.source_states()
        # Source ids are unique per tenant: schedule by (tenant, id).
        key = {(s.tenant_id, s.source_id): f"{s.tenant_id}\x1f{s.source_id}" for s in states}
        schedules = [
            SourceSchedule(
                source_id=key[(s.tenant_id, s.source_id)],
                sync=s.sync,
                poll_interval_s=s.poll_interval_s,
                paused=s.paused,
                last_sync_at=s.last_sync_at,
                last_full_at=s.last_full_at,
                retry_at=s.retry_at,
                busy=(s.tenant_id, s.source_id) in busy,
            )
            for s in states
        ]
        out = []
        for scheduled, mode in due_syncs(
            schedules, time.time() if now is None else now, full_every_s=self.full_every_s
        ):
            tenant_id, source_id = scheduled.split("\x1f", 1)
            run = self.catalog.request_sync(tenant_id, source_id, mode.value, origin="schedule")
            if run is not None:
                out.append(run.sync_id)
        return out

    def run_once(self) -> bool:
        """Schedule, then run at most one sync and one backfill, then apply
        the events that are due. Returns True when something ran."""
        if self.schedule:
            self.schedule_due()
        ran = False
        run = self.catalog.claim_sync_run()
        if run is not None:
            self.run_sync(run)
            ran = True
        backfill = self.catalog.claim_backfill()
        if backfill is not None:
            self.run_backfill(backfill)
            ran = True
        if self.catalog.pending_events(limit=1):
            self.run_stream()
            ran = True
        return ran

    def _child(self, args: Sequence[str]) -> tuple[int, str, str]:
        """Run ``ragsync ARGS`` with the store flags; (exit code, stdout, stderr)."""
        argv = [*self.command, *args, *self.store_args, "--json"]
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=dict(os.environ),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            return 124, "", f"ran past the worker's {self.timeout_s:g} s limit ({exc})"
        return proc.returncode, proc.stdout, proc.stderr

    def run_sync(self, run: SyncRun) -> None:
        """Run one claimed sync request and record how it ended."""
        args = ["sync", run.source_id, "--tenant", run.tenant_id, "--quiet"]
        args += ["--full"] if run.mode == "full" else []
        code, out, err = self._child(args)
        data = _last_json(out) or {}
        if code == 0 and "totals" in data:
            counts = {"mode": data.get("mode"), "reason": data.get("reason"), **data["totals"]}
            self.catalog.finish_sync_run(run.sync_id, succeeded=True, counts=counts)
            return
        error = str(data.get("error") or "") or _tail(err) or f"ragsync sync exited with {code}"
        self.catalog.finish_sync_run(run.sync_id, succeeded=False, error=error)

    def run_stream(self) -> None:
        """Apply the queued events until the queue is drained. A failed run
        leaves its events queued (the stream's own retries and dead letters
        decide their fate); the next pass tries again."""
        self._child(["stream", "--until-idle", "--quiet"])

    def run_backfill(self, row: BackfillRow) -> None:
        """Run one claimed backfill request and record how it ended."""
        if row.reason != "embedding_model":
            self.catalog.update_backfill_progress(row.backfill_id, state="failed")
            return
        args = ["reembed", "--model", row.target_index, "--quiet"]
        if row.max_docs_per_s:
            args += ["--max-docs-per-s", str(row.max_docs_per_s)]
        code, out, _ = self._child(args)
        data = _last_json(out) or {}
        total, failed = int(data.get("total") or 0), int(data.get("failed") or 0)
        if code == 0:
            state = "flipped" if data.get("state") == "live" else "built"
        else:
            state = "refused" if code == 1 else "failed"
        self.catalog.update_backfill_progress(
            row.backfill_id, total=total, done=max(total - failed, 0), failed=failed, state=state
        )

    # -- the loop -------------------------------------------------------------------------

    def serve_forever(self, on_error: Callable[[BaseException], None] | None = None) -> None:
        """Pass after pass until :meth:`stop`; idle passes sleep ``poll_s``."""
        self.catalog.fail_interrupted_sync_runs()
        while not self._stop.is_set():
            try:
                busy = self.run_once()
            except Exception as exc:  # noqa: BLE001 - the loop outlives one bad pass
                if on_error is not None:
                    on_error(exc)
                busy = False
            if not busy:
                self._stop.wait(self.poll_s)

    def start(self) -> threading.Thread:
        """Run :meth:`serve_forever` in a daemon thread."""
        self._thread = threading.Thread(target=self.serve_forever, name="ragsync-worker", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the loop to end after the current pass (a running child finishes first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
