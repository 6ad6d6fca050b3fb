"""Signals with real processes: SIGINT and SIGTERM stop a backfill or a stream
promptly and cleanly, SIGKILL leaves no child behind, and the next run ends in
the same state as a run that was never interrupted.

The signal is sent by the process to itself at the worst moment (after a
document's index upsert, before its catalog rows exist) through the
``RAGSYNC_CRASH_AFTER_INDEX_WRITES=N:SIGNAL`` fault hook of
``tests/crash_hooks.py`` (loaded by the writer through ``RAGSYNC_WRITE_HOOKS``),
so every run is stopped at the same point; the handlers that react to it are
the real ones (``ragsync.ops.lifecycle``).

"Promptly" is asserted on the path the stop took, not on a clock a loaded
machine can stretch (the time is measured by ``benchmarks/bench_stop.py``):
the step that sent the signal runs outside the main thread (so the main thread
handles the signal at once, whatever native call a step is in), the process
exits while that step is still parked (it waits for no step), and no helper
process cost the grace period (``$RAGSYNC_STOP_REPORT``, written by
``ragsync.ops.lifecycle.exit_abandoning_run``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from beam_pipelines.backfill import run_backfill
from beam_pipelines.streaming import run_stream
from ragsync.config import Settings, open_catalog
from ragsync.index.backends import open_keyword_index, open_vector_index
from ragsync.index.reconcile import reconcile
from ragsync.ops.lifecycle import KILLED_AFTER_GRACE
from tests.crash_hooks import crash_env
from tests.proc import kill_group, live_members, start_as_at_a_terminal

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
DIM = 384
EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGKILL": -signal.SIGKILL, "SIGINT:group": 130, "SIGTERM:group": 143}
"""Exit code by how the run is stopped (``:group``: the signal reaches the
whole process group, as a terminal's Ctrl-C or a service manager's stop
does: the parse children get it too, and must not turn it into a crash of
the document they read)."""
TOPICS = [
    "hotel limits",
    "taxi rides",
    "expense receipts",
    "laptop refresh",
    "parental leave",
    "badge access",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("signals") / "src"
    src.mkdir()
    for i, topic in enumerate(TOPICS):
        paras = [f"Policy {i}: the rule about {topic} is number {i * 7 + 3}.", f"Ask the {topic} desk first."]
        (src / f"policy-{i}.md").write_text(f"# {topic.title()}\n\n" + "\n\n".join(paras) + "\n")
    return src


def _state(settings: Settings) -> dict[str, object]:
    cat = open_catalog(settings)
    vec = open_vector_index(settings, DIM)
    kw = open_keyword_index(settings)
    try:
        return {
            "catalog": sorted(cat.chunks.chunk_ids_for_tenant("default")),
            "vector": sorted(vec.chunk_ids()),
            "keyword": sorted(kw.chunk_ids()),
            "status": cat.documents.document_counts_by_status(),
        }
    finally:
        kw.close()
        vec.close()
        cat.close()


@pytest.fixture(scope="module")
def clean_state(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    settings = Settings(home=str(tmp_path_factory.mktemp("clean") / "home"))
    summary = run_backfill(str(corpus), settings, show_progress=False)
    assert summary.documents_indexed == len(TOPICS)
    return _state(settings)


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, HF_HUB_OFFLINE="1", **extra)


def _stopped_by(cmd: list[str], signame: str, log: Path, extra_env: dict[str, str]) -> tuple[int, str]:
    """Run ``cmd`` in its own session until the fault hook sends ``signame``;
    returns (exit code, log text). For SIGINT and SIGTERM, asserts the path
    of a prompt stop (module docstring)."""
    report = log.with_suffix(".stop.json")
    env = crash_env(
        RAGSYNC_CRASH_AFTER_INDEX_WRITES=f"2:{signame}", RAGSYNC_STOP_REPORT=str(report), **extra_env
    )
    proc = start_as_at_a_terminal(cmd, env, log)
    try:
        deadline = time.monotonic() + 600
        while "[fault] sending" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the fault hook never fired"
            time.sleep(0.05)
        code = proc.wait(timeout=120)  # a bound for a hung run, not the promptness asserted below
        # No helper process (parse children, Tika, the Milvus Lite server)
        # outlives the main one - for SIGKILL too, without our help.
        wait_until = time.monotonic() + 10
        while live_members(proc.pid, "sid") and time.monotonic() < wait_until:
            time.sleep(0.1)
        left = live_members(proc.pid, "sid")
    finally:
        kill_group(proc.pid)
    assert left == [], f"processes outlived the stopped run: {left}"
    text = log.read_text(errors="replace")
    if signame != "SIGKILL":
        _assert_prompt_stop(signame, text, report)
    return code, text


def _assert_prompt_stop(signame: str, text: str, report: Path) -> None:
    """The stop handled in a main thread that runs no step, taken without
    waiting for the step in progress or for any helper's grace period."""
    sender = text.split("[fault] sending", 1)[1].split("\n", 1)[0]
    assert "from the step's thread" in sender and "MainThread" not in sender, sender
    how = json.loads(report.read_text())
    assert how["why"] == signame.split(":")[0]
    # The step that sent the signal is parked for good: the process ended
    # with that pipeline's thread still running (it waited for no step).
    assert how["left_running"], how
    slow = {pid: way for pid, way in how["helpers"].items() if way == KILLED_AFTER_GRACE}
    assert slow == {}, f"helpers that cost the grace period: {how['helpers']}"


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGKILL", "SIGINT:group"])
def test_backfill_stopped_by_a_signal_then_rerun_matches_a_clean_run(
    signame: str, corpus: Path, clean_state: dict[str, object], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    cmd = [
        sys.executable,
        "-m",
        "cli.main",
        "backfill",
        str(corpus),
        "--home",
        str(home),
        "--quiet",
    ]
    code, text = _stopped_by(cmd, signame, tmp_path / "run.log", {})
    assert code == EXIT[signame], text[-3000:]
    if signame != "SIGKILL":
        assert "run the same command again to resume" in text
        assert "Traceback" not in text
    # The next run starts at once (no lock left behind) and finishes the work.
    summary = run_backfill(str(corpus), Settings(home=str(home)), show_progress=False)
    assert summary.documents_seen == len(TOPICS)
    settings = Settings(home=str(home))
    assert _state(settings) == clean_state
    assert reconcile(settings, DIM).ok


def _events(corpus: Path) -> str:
    lines = []
    for i, path in enumerate(sorted(corpus.iterdir())):
        event = {
            "source_id": "docs",
            "doc_id": path.name,
            "op": "upsert",
            "source_version": 1,
            "acl_groups": ["everyone"],
            "content_uri": str(path),
            "event_time": 1_700_000_000 + i,
        }
        lines.append(json.dumps(event))
    return "\n".join(lines) + "\n"


def _stream_home(tmp_path: Path, corpus: Path) -> Path:
    home = tmp_path / "home"
    events = tmp_path / "events.jsonl"
    events.write_text(_events(corpus))
    base = [sys.executable, "-m", "cli.main"]
    for args in (
        ["sources", "add", "docs", "--tenant", "default", "--type", "object_store", "--uri", str(corpus)],
        ["events", "push", str(events)],
    ):
        done = subprocess.run([*base, *args, "--home", str(home)], env=_env(), cwd=ROOT, capture_output=True)
        assert done.returncode == 0, done.stderr.decode()
    return home


@pytest.fixture(scope="module")
def clean_stream_state(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    home = _stream_home(tmp_path_factory.mktemp("clean-stream"), corpus)
    settings = Settings(home=str(home))
    summary = run_stream(settings, until_idle=True, show_progress=False)
    assert summary.documents_indexed == len(TOPICS)
    return _state(settings)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGTERM:group"])
def test_stream_stopped_by_a_signal_then_resumed_matches_a_clean_run(
    signame: str, corpus: Path, clean_stream_state: dict[str, object], tmp_path: Path
) -> None:
    home = _stream_home(tmp_path, corpus)
    base = [sys.executable, "-m", "cli.main"]
    # A long-running stream (no --until-idle), as an operator runs it; short
    # leases so the resumed run gets the unacknowledged events back quickly.
    cmd = [*base, "stream", "--home", str(home), "--lease-s", "2", "--quiet"]
    code, text = _stopped_by(cmd, signame, tmp_path / "stream.log", {})
    assert code == EXIT[signame], text[-3000:]
    assert "run the same command again to resume" in text
    resumed = run_stream(Settings(home=str(home)), until_idle=True, show_progress=False)
    assert resumed.documents_indexed >= len(TOPICS) - 2
    settings = Settings(home=str(home))
    assert _state(settings) == clean_stream_state
    assert reconcile(settings, DIM).ok


def test_a_lease_holder_is_gone_once_its_process_is() -> None:
    import subprocess
    import sys

    from ragsync.ops.lifecycle import holder_gone, run_identity

    me = run_identity()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holder = run_identity(child.pid)
        assert not holder_gone(holder, me) and not holder_gone(me, me)
        # The pid taken by another process (another start time) is another holder.
        host, pid, start = holder.rsplit(":", 2)
        assert holder_gone(f"{host}:{pid}:{int(start) + 1}", me)
        assert not holder_gone(f"elsewhere:{pid}:{start}", me)  # another host: not known to be gone
    finally:
        child.kill()
        child.wait()
    assert holder_gone(holder, me)
