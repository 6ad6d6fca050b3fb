"""The Dataflow Flex Template's job: a backfill whose every parameter is a
pipeline option.

The Flex Template launcher runs ``python main.py --source=gs://b/p
--tenant=acme --acl_groups=staff --runner=DataflowRunner --project=...``:
one ``--name=value`` per parameter of ``metadata.json`` (generated from
``ragsync.options``, see ``template_metadata``) plus Beam's own options.
``run`` takes exactly that. Parameters left out fall back to their
``RAGSYNC_*`` environment variable, then the defaults.

Exit codes: 0 the source was indexed; 1 the sync failed (listing failed,
guard held deletes back; the message says why); 2 a configuration error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from ragsync.errors import ConfigurationError


def template_metadata() -> dict[str, Any]:
    """The content of ``templates/dataflow/metadata.json``."""
    from ragsync.options import template_parameters

    return {
        "name": "ragsync backfill",
        "description": "Index a gs:// or s3:// prefix into Milvus and Elasticsearch (or the embedded stores) "
        "with ACL ids, content-keyed ids and dead letters.",
        "parameters": template_parameters(),
    }


def _check_model(settings: Any, expected: str) -> Any:
    """The live index version's model; ``expected`` (the ``model`` parameter)
    must name it when given."""
    from ragsync.index_versions import live_spec

    spec = live_spec(settings)
    if expected and expected != spec.name:
        raise ConfigurationError(
            f"model {expected!r} is not the live index version's model {spec.name!r}: "
            "change models with `ragsync reembed --model`"
        )
    return spec


def run(argv: Sequence[str] | None = None) -> int:
    """Backfill ``--source`` as the launcher asks; prints the summary as JSON.

    Args:
        argv: the launcher's flags (default ``sys.argv[1:]``).

    Returns:
        The exit code (see the module docstring).
    """
    from beam_pipelines.cli import quiet_environment
    from beam_pipelines.cli_common import fail
    from beam_pipelines.sync import SyncError, run_backfill
    from ragsync import lifecycle
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


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] == ["--metadata"]:
        print(json.dumps(template_metadata(), indent=2))
        sys.exit(0)
    sys.exit(run())
