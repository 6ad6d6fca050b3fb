"""The Dataflow Flex Templates: the backfill's ``main.py`` takes exactly what
the launcher passes (``--source=... --tenant=... --acl_groups=...
--runner=...``, one flag per ``metadata.json`` parameter), and indexes the
source; the stream's ``main.py`` (``--event_source=...``) applies events.
Both ``metadata.json`` files are generated from the one options table."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipelines.template import main, run, run_stream_template, template_metadata
from ragsync.config import Settings, open_catalog
from ragsync.options import ALL_OPTIONS, SETTING_OPTIONS, STREAM_OPTIONS, template_parameters
from tests.pipeline_options import RagsyncOptions
from tests.proc import run_json

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "templates" / "dataflow"
STREAM_TEMPLATE = ROOT / "templates" / "dataflow_stream"


def test_metadata_json_is_generated_from_the_options() -> None:
    on_disk = json.loads((TEMPLATE / "metadata.json").read_text())
    assert on_disk == template_metadata(), "regenerate: python -m beam_pipelines.template --metadata"
    names = [p["name"] for p in on_disk["parameters"]]
    flags = set(PipelineOptions([]).view_as(RagsyncOptions).get_all_options())
    # All but `home`, `lanes` and the stream's own options.
    assert len(names) == len(set(names)) == len(ALL_OPTIONS) - 2 - len(STREAM_OPTIONS)
    assert set(names) <= flags
    assert [p["name"] for p in on_disk["parameters"] if not p["isOptional"]] == ["source"]
    # Every parameter, given as the launcher gives it, is parsed as that option.
    types = {o.name: o.type for o in ALL_OPTIONS}
    argv = [f"--{name}={types[name](1)}" for name in names]
    parsed = PipelineOptions(argv).view_as(RagsyncOptions).get_all_options()
    assert all(parsed[name] is not None for name in names)


def test_stream_metadata_json_is_generated_from_the_same_options() -> None:
    on_disk = json.loads((STREAM_TEMPLATE / "metadata.json").read_text())
    assert on_disk == template_metadata("stream"), (
        "regenerate: python -m beam_pipelines.template --metadata stream"
    )
    names = [p["name"] for p in on_disk["parameters"]]
    flags = set(PipelineOptions([]).view_as(RagsyncOptions).get_all_options())
    assert len(names) == len(set(names)) and set(names) <= flags
    assert [p["name"] for p in on_disk["parameters"] if not p["isOptional"]] == ["event_source"]
    assert {o.name for o in STREAM_OPTIONS} | {"model", "lanes"} <= set(names)
    assert not {"source", "tenant", "acl_groups", "home"} & set(names)
    # The settings part is the backfill template's, parameter for parameter.
    backfill = {p["name"]: p for p in template_metadata("backfill")["parameters"]}
    shared = [p for p in on_disk["parameters"] if p["name"] in backfill]
    assert shared and all(p == backfill[p["name"]] for p in shared)
    settings = [o.name for o in SETTING_OPTIONS if o.name != "home"]
    assert names[-len(settings) :] == settings


def test_metadata_command_prints_either_template(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, job in ((["--metadata"], "backfill"), (["--metadata", "stream"], "stream")):
        assert main(argv) == 0
        assert json.loads(capsys.readouterr().out) == template_metadata(job)
    with pytest.raises(ValueError, match="unknown template job 'nightly'"):
        template_parameters("nightly")


def _corpus(root: Path) -> Path:
    src = root / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("Alpacas are domesticated camelids from South America.\n")
    (src / "b.md").write_text("# Laptops\n\nEvery employee receives a laptop on the first day.\n")
    (src / "sub" / "c.txt").write_text("The cafeteria opens at eight and closes at four.\n")
    return src


def test_main_py_as_the_launcher_runs_it_indexes_the_folder(tmp_path: Path) -> None:
    src = _corpus(tmp_path)
    home = tmp_path / "home"
    env = dict(os.environ, RAGSYNC_HOME=str(home), PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    argv = [sys.executable, str(TEMPLATE / "main.py"), f"--source={src}", "--tenant=T"]
    argv += ["--acl_groups=staff,hr", "--runner=DirectRunner"]
    summary = run_json(argv, env, tmp_path)
    assert (summary["documents_listed"], summary["documents_indexed"], summary["dead_lettered"]) == (3, 3, 0)
    catalog = open_catalog(Settings(home=str(home)))
    try:
        assert catalog.documents.document_counts_by_status("T") == {"indexed": 3}
        assert catalog.documents.document_counts_by_status() == {"indexed": 3}
    finally:
        catalog.close()


def test_main_reports_an_unchanged_folder_without_a_pipeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The template runs the backfill as ``ragsync backfill`` does: a second
    run over the unchanged folder lists it on the launcher and starts no
    pipeline (``pipeline_skipped`` 1); ``reread`` runs the pipeline again."""
    src = _corpus(tmp_path)
    hour_ago = time.time() - 3600  # outside the racy window of the first listing
    for f in (src / "a.txt", src / "b.md", src / "sub" / "c.txt"):
        os.utime(f, (hour_ago, hour_ago))
    argv = [f"--home={tmp_path / 'home'}", f"--source={src}", "--tenant=T", "--acl_groups=staff"]
    argv += ["--runner=DirectRunner"]

    def summary(*extra: str) -> dict[str, int]:
        assert run([*argv, *extra]) == 0
        out: dict[str, int] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        return out

    first = summary()
    assert (first["documents_indexed"], first["pipeline_skipped"]) == (3, 0)
    again = summary()
    assert (again["pipeline_skipped"], again["documents_listed"], again["documents_unread"]) == (1, 3, 3)
    assert (again["documents_indexed"], again["chunks_embedded"], again["chunks_written"]) == (0, 0, 0)
    reread = summary("--reread=1")
    assert (reread["pipeline_skipped"], reread["documents_unread"], reread["documents_seen"]) == (0, 0, 3)
    assert reread["documents_unchanged"] == 3


def test_missing_source_and_foreign_model_are_configuration_errors(tmp_path: Path) -> None:
    home = f"--home={tmp_path / 'home'}"
    assert run([home, "--tenant=T", "--runner=DirectRunner"]) == 2
    src = _corpus(tmp_path)
    assert run([home, f"--source={src}", "--model=some-other-model", "--runner=DirectRunner"]) == 2
    assert run([home, f"--source={tmp_path / 'missing'}", "--runner=DirectRunner"]) == 2


def test_dockerfile_builds_launcher_and_workers_from_the_locked_requirements() -> None:
    import apache_beam

    text = (TEMPLATE / "Dockerfile").read_text()
    assert f"ARG BEAM_VERSION={apache_beam.__version__}" in text
    assert f'"apache-beam[gcp,aws]=={apache_beam.__version__}"' in text
    assert "pip install --no-cache-dir -r requirements.txt" in text
    assert "COPY --from=launcher /opt/google/dataflow/python_template_launcher" in text
    assert "FLEX_TEMPLATE_PYTHON_PY_FILE=/template/main.py" in text
    pinned = (ROOT / "requirements.txt").read_text().splitlines()
    assert f"apache-beam=={apache_beam.__version__}" in pinned


def test_main_works_when_another_tenant_has_a_source_of_that_id(tmp_path: Path) -> None:
    """The quick start's home may hold the same folder under another tenant:
    ``--tenant`` names which one the template syncs (it failed with "source
    exists for several tenants")."""
    from beam_pipelines.quick import source_id_for
    from connectors.sources import register_source

    src = _corpus(tmp_path)
    settings = Settings(home=str(tmp_path / "home"))
    register_source(settings, source_id_for(str(src)), "other", "object_store", str(src))
    home = f"--home={tmp_path / 'home'}"
    assert run([home, f"--source={src}", "--tenant=T", "--acl_groups=staff", "--runner=DirectRunner"]) == 0
    catalog = open_catalog(settings)
    try:
        assert catalog.documents.document_counts_by_status("T") == {"indexed": 3}
        assert catalog.documents.document_counts_by_status("other") == {}
    finally:
        catalog.close()


def test_stream_main_py_as_the_launcher_runs_it_applies_queued_events(tmp_path: Path) -> None:
    """The stream template's main, started the way the launcher starts it,
    with the local queue as its bus (Pub/Sub and Kafka cannot run here; their
    read path is tested in tests/test_event_sources.py) until the queue is idle."""
    from connectors.sources import register_source
    from tests.queue_events import change_event, push_events

    src = _corpus(tmp_path)
    home = tmp_path / "home"
    settings = Settings(home=str(home))
    register_source(settings, "wiki", "T", "wiki", str(src))
    docs = {"a": src / "a.txt", "b": src / "b.md"}
    push_events(settings, [change_event("wiki", n, "upsert", 1, ["staff"], str(p)) for n, p in docs.items()])
    env = dict(os.environ, RAGSYNC_HOME=str(home), PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    argv = [sys.executable, str(STREAM_TEMPLATE / "main.py"), "--event_source=queue", "--until_idle=1"]
    argv += ["--event_lease_s=5", "--runner=FnApiRunner"]
    summary = run_json(argv, env, tmp_path)
    assert (summary["events_applied"], summary["documents_indexed"], summary["dead_lettered"]) == (2, 2, 0)
    catalog = open_catalog(settings)
    try:
        assert catalog.documents.document_counts_by_status("T") == {"indexed": 2}
    finally:
        catalog.close()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "--event_source must be one of pubsub, kafka, queue, got ''"),
        (["--event_source=sqs"], "got 'sqs'"),
        (["--event_source=pubsub", "--until_idle=1"], "until_idle applies to --event_source=queue only"),
        (["--event_source=pubsub"], "--pubsub-subscription"),
        (["--event_source=kafka", "--kafka_topic=t"], "--kafka-topic and --kafka-bootstrap"),
        (["--event_source=queue", "--model=some-other-model"], "is not the live index version's model"),
    ],
)
def test_stream_template_configuration_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = run_stream_template([f"--home={tmp_path / 'home'}", *argv, "--runner=FnApiRunner"])
    assert code == 2
    assert message in capsys.readouterr().err
