"""The Dataflow Flex Templates' jobs: the bounded backfill (``run``) and the
long-running stream (``run_stream_template``), whose every parameter is a
pipeline option.

The Flex Template launcher runs ``python main.py --source=gs://b/p
--tenant=acme --acl_groups=staff --runner=DataflowRunner --project=...``:
one ``--name=value`` per parameter of ``metadata.json`` (generated from
``ragsync.options``, see ``template_metadata``) plus Beam's own options.
``run`` takes exactly that. Parameters left out fall back to their
``RAGSYNC_*`` environment variable, then the defaults. The stream template
(``templates/dataflow_stream``) works the same way with
``--event_source=pubsub --pubsub_subscription=...`` (or Kafka).

Both metadata files come from the one options table:
``python -m beam_pipelines.template --metadata [backfill|stream]``.

Exit codes: 0 the source was indexed (the stream: it finished); 1 the sync
failed (listing failed, guard held deletes back; the message says why); 2 a
configuration error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from ragsync.errors import ConfigurationError

_DESCRIPTIONS = {
    "backfill": (
        "ragsync backfill",
        "Index a gs:// or s3:// prefix into Milvus and Elasticsearch (or the embedded stores) "
        "with ACL ids, content-keyed ids and dead letters.",
    ),
    "stream": (
        "ragsync stream",
        "Apply change events (upsert, delete, acl) from Pub/Sub or Kafka to Milvus, the keyword index "
        "and the catalog, until the job is drained or cancelled.",
    ),
}


def template_metadata(job: str = "backfill") -> dict[str, Any]:
    """The content of a Flex Template's ``metadata.json``: ``backfill``
    (``templates/dataflow/``) or ``stream`` (``templates/dataflow_stream/``),
    parameters from ``ragsync.options.template_parameters``.

    Raises:
        ValueError: an unknown ``job``.
    """
    from ragsync.options import template_parameters

    parameters = template_parameters(job)
    name, description = _DESCRIPTIONS[job]
    return {"name": name, "description": description, "parameters": parameters}


def _check_model(settings: Any, expected: str) -> Any:
    """The live index version's model; ``expected`` (the ``model`` parameter)
    must name it when given."""
    from ragsync.index.versions import live_spec

    spec = live_spec(settings)
    if expected and expected != spec.name:
        raise ConfigurationError(
            f"model {expected!r} is not the live index version's model {spec.name!r}: "
            "change models with `ragsync reembed --model`"
        )
    return spec


def run(argv: Sequence[str] | None = None) -> int:
    """Backfill ``--source`` as the launcher asks
    (``beam_pipelines.backfill.run_backfill``: an unchanged folder or prefix
    runs no pipeline, its summary says ``pipeline_skipped`` 1); prints the
    summary as JSON.

    Args:
        argv: the launcher's flags (default ``sys.argv[1:]``).

    Returns:
        The exit code (see the module docstring).
    """
    from beam_pipelines.backfill import run_backfill
    from ragsync.errors import SyncError
    from ragsync.ops import lifecycle
    from ragsync.ops.console import fail, quiet_environment
    from ragsync.options import settings_from_pipeline_args

    quiet_environment()
    lifecycle.install_child_watch()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        settings, values, beam_args = settings_from_pipeline_args(argv)
        if not values.get("source"):
            raise ConfigurationError(
                "--source (a folder, gs://bucket/prefix or s3://bucket/prefix) is required"
            )
        groups = [g.strip() for g in str(values.get("acl_groups", "everyone")).split(",") if g.strip()]
        spec = _check_model(settings, str(values.get("model") or ""))
        summary = run_backfill(
            values["source"],
            settings,
            tenant_id=values.get("tenant") or "default",
            source_id=values.get("source_id") or "",
            acl_groups=groups,
            beam_args=beam_args,
            show_progress=False,
            spec=spec,
            max_delete_share=values.get("max_delete_share"),
            reread=bool(values.get("reread")),
        )
    except ConfigurationError as exc:
        return fail(f"configuration error: {exc}", 2, prog="ragsync template")
    except SyncError as exc:
        return fail(exc, 1, prog="ragsync template")
    print(json.dumps(summary.to_dict(), sort_keys=True))
    return 0


EVENT_SOURCES = ("pubsub", "kafka", "queue")


def run_stream_template(argv: Sequence[str] | None = None) -> int:
    """Run the stream as the stream template's launcher asks; prints the
    summary as JSON when the stream finishes (``until_idle``, a drained job).

    Args:
        argv: the launcher's flags (default ``sys.argv[1:]``):
            ``--event_source`` (pubsub, kafka or queue) with its bus options,
            any setting, and Beam's options (``--streaming`` is added).

    Returns:
        0 the stream finished; 2 a configuration error (no or an unknown
        ``--event_source``, a bus option missing, ``until_idle`` with a bus,
        a ``model`` that is not the live index version's).
    """
    from beam_pipelines.streaming import run_stream
    from ragsync.ops import lifecycle
    from ragsync.ops.console import fail, quiet_environment
    from ragsync.options import settings_from_pipeline_args

    quiet_environment()
    lifecycle.install_child_watch()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        settings, values, beam_args = settings_from_pipeline_args(argv)
        source = str(values.get("event_source") or "")
        if source not in EVENT_SOURCES:
            choices = ", ".join(EVENT_SOURCES)
            raise ConfigurationError(f"--event_source must be one of {choices}, got {source!r}")
        until_idle = bool(values.get("until_idle"))
        if until_idle and source != "queue":
            raise ConfigurationError("until_idle applies to --event_source=queue only")
        spec = _check_model(settings, str(values.get("model") or ""))
        summary = run_stream(
            settings,
            until_idle=until_idle,
            source=source,
            beam_args=beam_args,
            show_progress=False,
            spec=spec,
            lanes=str(values.get("lanes") or "all"),
            subscription=str(values.get("pubsub_subscription") or ""),
            topic=str(values.get("kafka_topic") or ""),
            bootstrap=str(values.get("kafka_bootstrap") or ""),
        )
    except ConfigurationError as exc:
        return fail(f"configuration error: {exc}", 2, prog="ragsync stream template")
    print(json.dumps(summary.to_dict(), sort_keys=True))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``--metadata [backfill|stream]``: print that template's metadata JSON;
    otherwise run the backfill template's job."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--metadata"] and len(argv) <= 2:
        print(json.dumps(template_metadata(argv[1] if len(argv) == 2 else "backfill"), indent=2))
        return 0
    return run(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
