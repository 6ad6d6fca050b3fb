"""The worker that runs what the control plane accepts.

``ragsync serve`` starts one in a thread (``--workers 0`` turns it off);
``ragsync worker`` runs the same loop in the foreground, for deployments that
keep the API and the work apart. Each pass:

1. **schedules**: every source that syncs by ``poll`` or ``webhook`` gets a
   full listing once a day and polled sources an incremental sync every
   ``poll_interval_s`` (``ragsync.decisions.due_syncs``: paused sources, sources
   with a sync pending and sources a rate limit asked to wait are skipped);
2. **runs one sync request** (``queued -> running -> succeeded | failed``),
   round-robin by tenant (``Catalog.claim_sync_run``: one tenant's queue
   delays another's sync by at most one sync, not by its length):
   ``ragsync sync SOURCE_ID --json`` in a child process, whose counts or
   error are recorded on the request;
3. **runs one backfill request**: an operator's (no tenant)
   ``embedding_model`` backfill re-embeds into a new index version with
   ``ragsync reembed --model TARGET_INDEX`` (built, not flipped: flipping needs
   a golden set, ``ragsync index-versions flip``); a ``parser`` or ``chunker``
   backfill (a tenant's: that tenant's documents only) parses or chunks again
   from the stored copies with ``ragsync reindex BACKFILL_ID``, which records
   its progress, its end and why documents were left behind on the request;
   a request the worker cannot run ends ``failed`` with the reason;
4. **applies the queued events** that are due (``POST /internal/events``,
   ``ragsync events push``): ``ragsync stream --until-idle`` in a child, so
   what the API accepted is applied without a separate ``ragsync stream``.

Work runs in child processes, one at a time (each leads its own process
group; stopping the worker, as ``serve`` does on SIGTERM or SIGINT, ends the
running child and its helpers, so none outlives ``serve``): a pipeline that crashes takes
nothing of the API with it, and the embedded stores (Milvus Lite, tantivy)
allow one writer process. A run left ``running`` by a worker that died is
marked failed when the next worker starts.

No Beam here (the control plane never imports it): the children do the work.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ragsync.catalog import BackfillRow, Catalog, SyncRun
from ragsync.decisions import SourceSchedule, due_syncs
from ragsync.ops.display import host_free

DEFAULT_POLL_S = 2.0
DEFAULT_TIMEOUT_S = 6 * 3600.0
CHILD_GRACE_S = 10.0  # a stopped child reports and cleans up within 10 s (ragsync.ops.lifecycle)


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


def _child_error(code: int, out: str, err: str, command: str) -> str:
    """Why a child ``ragsync COMMAND`` failed, in one line for the requester
    (``GET /v1/backfills/{id}``): its JSON error, else its last stderr line
    (``ragsync: configuration error: ...``), host details removed."""
    lines = err.strip().splitlines()
    error = str((_last_json(out) or {}).get("error") or "") or (lines[-1] if lines else "")
    return host_free(error or f"ragsync {command} exited with {code}")[:1000]


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
        command: Sequence[str] = (sys.executable, "-m", "cli.main"),
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
        self._child_lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._last_tenant: str | None = None

    # -- one pass -----------------------------------------------------------------------

    def schedule_due(self, now: float | None = None) -> list[str]:
        """Request the syncs that are due; returns their sync ids."""
        busy = self.catalog.syncs.pending_sync_sources()
        states = self.catalog.syncs.source_states()
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
            run = self.catalog.syncs.request_sync(tenant_id, source_id, mode.value, origin="schedule")
            if run is not None:
                out.append(run.sync_id)
        return out

    def run_once(self) -> bool:
        """Schedule, then run at most one sync and one backfill, then apply
        the events that are due. Returns True when something ran."""
        if self.schedule:
            self.schedule_due()
        ran = False
        run = self.catalog.syncs.claim_sync_run(after_tenant=self._last_tenant)
        if run is not None:
            self._last_tenant = run.tenant_id  # round-robin: the next tenant goes next
            self.run_sync(run)
            ran = True
        backfill = self.catalog.backfills.claim_backfill()
        if backfill is not None:
            self.run_backfill(backfill)
            ran = True
        if self.catalog.queue.pending_events(limit=1):
            self.run_stream()
            ran = True
        return ran

    def _child(self, args: Sequence[str]) -> tuple[int, str, str]:
        """Run ``ragsync ARGS`` with the store flags; (exit code, stdout, stderr).

        The child leads its own process group, so :meth:`stop` ends it and
        everything it started (parse children, Tika, a Milvus Lite server)
        with one signal; a child still running at ``timeout_s`` is ended the
        same way (exit code 124).
        """
        argv = [*self.command, *args, *self.store_args, "--json"]
        with self._child_lock:
            if self._stop.is_set():
                return 143, "", "the worker is stopping"
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=dict(os.environ),
                start_new_session=True,
            )
            self._proc = proc
        try:
            out, err = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            end_process_group(proc)
            out, err = proc.communicate()
            return 124, out, f"ran past the worker's {self.timeout_s:g} s limit"
        finally:
            with self._child_lock:
                self._proc = None
        return proc.returncode, out, err

    def run_sync(self, run: SyncRun) -> None:
        """Run one claimed sync request and record how it ended."""
        args = ["sync", run.source_id, "--tenant", run.tenant_id, "--quiet"]
        args += ["--full"] if run.mode == "full" else []
        code, out, err = self._child(args)
        data = _last_json(out) or {}
        if code == 0 and "totals" in data:
            counts = {"mode": data.get("mode"), "reason": data.get("reason"), **data["totals"]}
            self.catalog.syncs.finish_sync_run(run.sync_id, succeeded=True, counts=counts)
            return
        error = str(data.get("error") or "") or _tail(err) or f"ragsync sync exited with {code}"
        # The tenant reads this error (GET /v1/sources/{id}/sync/{sync_id}): no host details.
        error = host_free(error)
        self.catalog.syncs.finish_sync_run(run.sync_id, succeeded=False, error=error)

    def run_stream(self) -> None:
        """Apply the queued events until the queue is drained. A failed run
        leaves its events queued (the stream's own retries and dead letters
        decide their fate); the next pass tries again."""
        self._child(["stream", "--until-idle", "--quiet"])

    def run_backfill(self, row: BackfillRow) -> None:
        """Run one claimed backfill request and record how it ended."""
        if row.reason in ("parser", "chunker"):
            self._run_reindex(row)
            return
        if row.reason != "embedding_model":
            error = f"no worker runs a backfill of reason {row.reason!r}"
            self.catalog.backfills.update_backfill_progress(row.backfill_id, state="failed", error=error)
            return
        if row.tenant_id is not None:
            # Re-embedding builds an index version of every tenant's chunks:
            # a tenant's request (one queued before the API refused them) is
            # refused here too, never run.
            error = (
                "an embedding_model backfill builds an index version every tenant shares: ask the operator"
            )
            self.catalog.backfills.update_backfill_progress(row.backfill_id, state="refused", error=error)
            return
        args = ["reembed", "--model", row.target_index, "--quiet"]
        if row.max_docs_per_s:
            args += ["--max-docs-per-s", str(row.max_docs_per_s)]
        code, out, err = self._child(args)
        data = _last_json(out) or {}
        total, failed = int(data.get("total") or 0), int(data.get("failed") or 0)
        if code == 0:
            state = "flipped" if data.get("state") == "live" else "built"
        else:
            state = "refused" if code == 1 else "failed"
        reasons = "; ".join((data.get("gate") or {}).get("reasons") or []) if code == 1 else ""
        self.catalog.backfills.update_backfill_progress(
            row.backfill_id,
            total=total,
            done=max(total - failed, 0),
            failed=failed,
            state=state,
            error=reasons or (_child_error(code, out, err, "reembed") if code not in (0, 1) else ""),
        )

    def _run_reindex(self, row: BackfillRow) -> None:
        """``ragsync reindex BACKFILL_ID``: the child records progress and
        the end itself; a child that fails before it could is recorded here."""
        code, out, err = self._child(["reindex", row.backfill_id, "--quiet"])
        if code != 0:
            error = _child_error(code, out, err, "reindex")
            self.catalog.backfills.update_backfill_progress(row.backfill_id, state="failed", error=error)

    # -- the loop -------------------------------------------------------------------------

    def serve_forever(self, on_error: Callable[[BaseException], None] | None = None) -> None:
        """Pass after pass until :meth:`stop`; idle passes sleep ``poll_s``."""
        self.catalog.syncs.fail_interrupted_sync_runs()
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
        """End the loop: a running child and its process group get SIGTERM
        (SIGKILL after ``CHILD_GRACE_S``), so none outlives the worker; the
        interrupted run is recorded failed. Waits up to ``timeout_s`` for the
        loop's thread."""
        self._stop.set()
        with self._child_lock:
            proc = self._proc
        if proc is not None:
            end_process_group(proc)
        if self._thread is not None:
            self._thread.join(timeout_s)


def end_process_group(proc: subprocess.Popen[str], grace_s: float | None = None) -> None:
    """SIGTERM the process group ``proc`` leads, SIGKILL it after ``grace_s``
    (default ``CHILD_GRACE_S``) if the leader has not exited; the leader is
    reaped. A group already gone is fine."""
    grace = CHILD_GRACE_S if grace_s is None else grace_s
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    # The group may outlive its leader (a helper the child started): end it too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
