"""Every setting as a pipeline option, a command-line flag and an environment
variable: one table, three ways in.

``SETTING_OPTIONS`` has one entry per ``Settings`` field (the chunker's
fields flattened as ``chunk_*``); ``JOB_OPTIONS`` the job's own parameters
(what to index and for whom); ``STREAM_OPTIONS`` the stream's (which event
bus). From that table:

* ``parse_pipeline_args`` takes ``--catalog_url=...`` (the form Beam, the
  Dataflow Flex Template launcher and ``ragsync CMD -- BEAM_ARGS`` use) and
  leaves Beam's own options for ``PipelineOptions``; ``add_pipeline_flags``
  adds the same flags to any parser (this module stays free of Beam);
* ``add_setting_flags`` gives the ``ragsync`` command line ``--catalog-url``
  (and the ``--catalog_url`` spelling);
* the environment variable is ``RAGSYNC_`` + the upper-cased name
  (``RAGSYNC_ES_API_KEY``);
* ``template_parameters`` writes both Flex Templates' ``metadata.json``.

Precedence: a ``ragsync`` flag, then a pipeline option, then the environment,
then the ``Settings`` default. ``settings_from`` builds the ``Settings``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragsync.config import Settings
from ragsync.errors import ConfigurationError
from ragsync.ingest.chunking import ChunkerConfig

CHUNK_PREFIX = "chunk_"
"""Option prefix of ``ChunkerConfig`` fields (``chunk_max_tokens``)."""


@dataclass(frozen=True)
class Option:
    """One option: its name (``snake_case``), type, help and whether it is secret
    (never printed, never passed on to child processes' command lines)."""

    name: str
    type: type
    help: str
    secret: bool = False

    @property
    def env(self) -> str:
        return "RAGSYNC_" + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _o(name: str, typ: type, help_: str, secret: bool = False) -> Option:
    return Option(name, typ, help_, secret)


_YES = ("1", "true", "yes", "on")
_NO = ("0", "false", "no", "off", "")


def yes_no(text: str) -> bool:
    """The value of a flag option given with a value (``--until_idle=1``, as a
    Flex Template passes parameters, or its environment variable).

    Raises:
        ValueError: not one of 1/0, true/false, yes/no, on/off.
    """
    word = text.strip().lower()
    if word in _YES or word in _NO:
        return word in _YES
    raise ValueError(f"{text!r} is not 1 or 0 (true/false, yes/no, on/off)")


def _flag_value(text: str) -> bool:
    """``yes_no`` for argparse (its error names the flag)."""
    try:
        return yes_no(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


SETTING_OPTIONS: tuple[Option, ...] = (
    _o("home", str, "local state directory (default ./ragsync-data)"),
    _o(
        "catalog_url",
        str,
        "SQLAlchemy URL of the catalog, e.g. postgresql+psycopg://u@host/db (default SQLite under home)",
        secret=False,
    ),
    _o("milvus_uri", str, "Milvus server URL, e.g. http://milvus:19530 (default Milvus Lite under home)"),
    _o("milvus_token", str, "Milvus server token (user:password or an API key)", secret=True),
    _o("collection", str, "vector collection (alias) name (default ragsync_chunks)"),
    _o("milvus_database", str, "Milvus database of this home's collections (default: Milvus' default)"),
    _o("vector_index", str, "vector backend: milvus (default) or a registered sink (ragsync.index.backends)"),
    _o(
        "keyword_index",
        str,
        "keyword backend: tantivy (one process), milvus (Milvus BM25 beside the vectors; several workers) "
        "or elasticsearch (default elasticsearch when es_url is set, else tantivy)",
    ),
    _o("es_url", str, "Elasticsearch URL, e.g. https://es:9200 (default: embedded tantivy index under home)"),
    _o("es_index", str, "Elasticsearch index (alias) name (default ragsync_chunks)"),
    _o("es_api_key", str, "Elasticsearch API key (base64 id:key)", secret=True),
    _o("es_username", str, "Elasticsearch basic-auth user (with es_password)"),
    _o("es_password", str, "Elasticsearch basic-auth password", secret=True),
    _o("object_store", str, "root of raw and parsed copies: a folder, gs:// or s3:// (default home/objects)"),
    _o("chunk_max_tokens", int, "largest chunk in model tokens (default 400)"),
    _o("chunk_overlap_ratio", float, "share of max tokens repeated when a paragraph is split (default 0.15)"),
    _o(
        "chunk_min_pieces",
        int,
        "paragraphs before a content-defined chunk boundary may end a chunk (default 2)",
    ),
    _o("chunk_boundary_modulus", int, "1 in N paragraphs is a content-defined boundary (default 3)"),
    _o("parse_timeout_s", int, "seconds to parse one document in the fast lane (default 120)"),
    _o("slow_parse_timeout_s", int, "seconds to parse one document in the slow (OCR) lane (default 1800)"),
    _o("parse_memory_mb", int, "address-space limit of the parse process in MiB (default 4096)"),
    _o(
        "max_bytes",
        int,
        "largest document in bytes; larger ones are dead-lettered too_large (default 256 MiB)",
    ),
    _o("max_pages", int, "most pages of a document; more are dead-lettered too_large (default 2000)"),
    _o("fetch_timeout_s", float, "seconds to read one document; over it: fetch_timeout (default 300)"),
    _o("max_archive_bytes", int, "most bytes an archive may expand to (default 512 MiB)"),
    _o("max_archive_members", int, "most members in an archive (default 10000)"),
    _o("max_archive_depth", int, "deepest nesting of archives and e-mails (default 3)"),
    _o("max_archive_ratio", float, "largest expansion ratio of an archive member over 1 MiB (default 200)"),
    _o(
        "max_children_s",
        float,
        "seconds one document's attachments and members may spend being parsed; the rest are "
        "dead-lettered too_large (default 60)",
    ),
    _o("embed_batch_size", int, "largest embedding batch, 1..1024 (default 64)"),
    _o(
        "event_lease_s", float, "seconds a read event stays hidden before it is delivered again (default 300)"
    ),
    _o(
        "boilerplate_min_docs",
        int,
        "a paragraph held by this many documents of a source is boilerplate whatever their share, "
        "0 = boilerplate off (default 50)",
    ),
    _o(
        "boilerplate_share",
        float,
        "a paragraph held by this share of a source's documents (and by 3 or more) is boilerplate "
        "(default 0.2)",
    ),
    _o(
        "rerank",
        str,
        "reranking after fusion: windows (the packaged model reads each candidate in windows of a few "
        "sentences), off, or a sentence-transformers CrossEncoder directory (default windows)",
    ),
    _o("rerank_weight", float, "the reranker's share of the final score, 0..1 (default 0.5)"),
    _o(
        "embed_model",
        str,
        "embedding model: a registered name or a local sentence-transformers directory (default the "
        "packaged all-MiniLM-L6-v2); used until an index exists, then change it with `ragsync reembed`",
    ),
    _o(
        "embed_backend",
        str,
        "embedding backend: torch, onnx or onnx-int8 (default: the live index's backend; onnx-int8 for a "
        "home without an index, torch for an index that records none); the ONNX forms are exported once "
        "from the same model files into model_cache_dir",
    ),
    _o("embed_device", str, "cpu, cuda or cuda:N (default cuda when torch sees a GPU, else cpu)"),
    _o("embed_max_tokens", int, "tokens the model reads per text; 0 = the model's own limit (default 0)"),
    _o("embed_query_prefix", str, "text put before every query, e.g. 'query: ' (default the model's prompt)"),
    _o("embed_passage_prefix", str, "text put before every chunk, e.g. 'passage: ' (default the model's)"),
    _o(
        "model_cache_dir",
        str,
        "where exported ONNX models are kept (default $XDG_CACHE_HOME/ragsync/models or "
        "~/.cache/ragsync/models, shared by every home)",
    ),
    _o("vcpu_hour_usd", float, "price of one vCPU-hour for the cost estimate (default 0.056)"),
    _o("gpu_hour_usd", float, "price of one GPU-hour for the cost estimate (default 0.35)"),
    _o(
        "quick_check_max_objects",
        int,
        "most objects of a gs:// or s3:// prefix a backfill lists on the launcher to find it unchanged "
        "and skip the pipeline; 0 = never (default 100000)",
    ),
    _o(
        "plugins",
        str,
        "comma-separated Python modules imported at start (and by every pipeline worker) that register "
        "source types or keyword backends when imported (default none)",
    ),
    _o(
        "ocr_languages",
        str,
        "Tesseract languages for scans and images, joined by '+', e.g. eng+deu+fra; each needs its "
        "traineddata on the workers (Debian: tesseract-ocr-deu); a change re-parses every document once "
        "(default eng)",
    ),
)

JOB_OPTIONS: tuple[Option, ...] = (
    _o("source", str, "what to index: a folder, gs://bucket/prefix or s3://bucket/prefix"),
    _o("tenant", str, "tenant that owns the documents (default: default)"),
    _o("acl_groups", str, "comma-separated groups allowed to read the documents (default: everyone)"),
    _o("source_id", str, "source id (default derived from the source location)"),
    _o(
        "max_delete_share",
        float,
        "largest share of the source's documents one listing may delete (default 0.5)",
    ),
    _o(
        "model",
        str,
        "embedding model the job expects; it fails when the live index version uses another "
        "(change models with `ragsync reembed`)",
    ),
    _o("lanes", str, "streaming, local queue: all, 'priority,fast' or slow (default all)"),
    _o(
        "reread",
        bool,
        "a flag (or true/false, 1/0): read every listed object, even those whose size, modification "
        "time or version match the catalog (default off: those are skipped unread)",
    ),
)

STREAM_OPTIONS: tuple[Option, ...] = (
    _o(
        "event_source",
        str,
        "event bus the stream reads: pubsub, kafka or queue (the catalog's events table)",
    ),
    _o("pubsub_subscription", str, "Pub/Sub subscription, projects/P/subscriptions/S (event_source pubsub)"),
    _o("kafka_topic", str, "Kafka topic of the events (event_source kafka)"),
    _o("kafka_bootstrap", str, "Kafka bootstrap servers, host:port[,host:port] (event_source kafka)"),
    _o(
        "until_idle",
        bool,
        "a flag (or true/false, 1/0): finish once the queue is drained and written (event_source queue "
        "only; default off: run until the job is drained or cancelled)",
    ),
)
"""The long-running stream's own parameters (its Flex Template's, beside ``lanes``)."""

ALL_OPTIONS: tuple[Option, ...] = SETTING_OPTIONS + JOB_OPTIONS + STREAM_OPTIONS
_BY_NAME = {o.name: o for o in ALL_OPTIONS}


def setting_names() -> list[str]:
    """The option name of every ``Settings`` field (``chunker`` as its ``chunk_*`` fields)."""
    names: list[str] = []
    for f in dataclasses.fields(Settings):
        if f.name == "chunker":
            names += [CHUNK_PREFIX + c.name for c in dataclasses.fields(ChunkerConfig)]
        else:
            names.append(f.name)
    return names


def add_pipeline_flags(parser: Any) -> None:
    """Add ``--name`` (underscores, Beam's style) for every option, default
    None: ``parse_pipeline_args`` uses it."""
    for opt in ALL_OPTIONS:
        if opt.type is bool:  # a flag, or a flag with a value (a template's ``--until_idle=1``)
            parser.add_argument(
                f"--{opt.name}",
                type=_flag_value,
                nargs="?",
                const=True,
                default=None,
                help=f"{opt.help} [env {opt.env}]",
            )
            continue
        parser.add_argument(f"--{opt.name}", type=opt.type, default=None, help=f"{opt.help} [env {opt.env}]")


def add_setting_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, skip: Iterable[str] = ("home",)
) -> None:
    """Add ``--name-with-dashes`` (and the ``--name_with_underscores``
    spelling) for every setting to a ``ragsync`` command parser; default None
    (unset: the pipeline option, environment or default decides)."""
    skipped = set(skip)
    for opt in SETTING_OPTIONS:
        if opt.name in skipped:
            continue
        flags = [opt.flag] if opt.flag == f"--{opt.name}" else [opt.flag, f"--{opt.name}"]
        parser.add_argument(
            *flags, dest=opt.name, type=opt.type, default=None, help=f"{opt.help} [env {opt.env}]"
        )


def _convert(opt: Option, raw: Any) -> Any:
    if isinstance(raw, str) and opt.type is bool:
        try:
            return yes_no(raw)
        except ValueError:
            raise ConfigurationError(f"{opt.env}={raw!r}: {opt.name} must be 1 or 0 (true/false)") from None
    if isinstance(raw, str) and opt.type is not str:
        try:
            return opt.type(raw.strip())
        except ValueError:
            raise ConfigurationError(f"{opt.env}={raw!r}: {opt.name} must be a {opt.type.__name__}") from None
    return raw


def option_values(*layers: Mapping[str, Any] | None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every option that is set: the first layer that has a non-None value for
    it, else its environment variable (a non-empty one). Unknown keys are ignored."""
    environ = os.environ if env is None else env
    out: dict[str, Any] = {}
    for opt in ALL_OPTIONS:
        value = None
        for layer in layers:
            if layer is not None and layer.get(opt.name) is not None:
                value = layer[opt.name]
                break
        if value is None and environ.get(opt.env):
            value = environ[opt.env]
        if value is not None:
            out[opt.name] = _convert(opt, value)
    return out


def settings_from(values: Mapping[str, Any]) -> Settings:
    """``Settings`` from option values (``option_values``); unset fields keep
    their defaults.

    Raises:
        ConfigurationError: a value out of range (``Settings`` checks limits).
    """
    kwargs: dict[str, Any] = {}
    chunk: dict[str, Any] = {}
    for name in setting_names():
        if name not in values:
            continue
        if name.startswith(CHUNK_PREFIX):
            chunk[name[len(CHUNK_PREFIX) :]] = values[name]
        else:
            kwargs[name] = values[name]
    if chunk:
        try:
            kwargs["chunker"] = ChunkerConfig(**chunk)
        except ValueError as exc:
            raise ConfigurationError(f"chunk options: {exc}") from None
    return Settings(**kwargs)


def parse_pipeline_args(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Split Beam-style arguments into ragsync's option values (set ones only)
    and the rest (Beam's own options: runner, project, s3_endpoint_url...)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_pipeline_flags(parser)
    known, rest = parser.parse_known_args(list(argv))
    return {k: v for k, v in vars(known).items() if v is not None}, rest


def settings_from_pipeline_args(
    argv: Sequence[str], *, flags: Mapping[str, Any] | None = None
) -> tuple[Settings, dict[str, Any], list[str]]:
    """``Settings`` from ``ragsync`` flags (``flags``, first), pipeline options
    in ``argv``, the environment and the defaults.

    Returns:
        (settings, every option value that is set, the Beam arguments that are
        not ragsync's: hand these to ``PipelineOptions``).
    """
    mine, rest = parse_pipeline_args(argv)
    values = option_values(flags, mine)
    return settings_from(values), values, rest


def setting_flags(settings: Settings) -> list[str]:
    """``ragsync`` flags that rebuild ``settings`` in a child process (fields
    that differ from the defaults; secrets are left to the environment)."""
    base = Settings(home=settings.home)
    out = ["--home", settings.home]
    for opt in SETTING_OPTIONS:
        if opt.name == "home" or opt.secret:
            continue
        if opt.name.startswith(CHUNK_PREFIX):
            field = opt.name[len(CHUNK_PREFIX) :]
            value, default = getattr(settings.chunker, field), getattr(base.chunker, field)
        else:
            value, default = getattr(settings, opt.name), getattr(base, opt.name)
        if value != default:
            out += [opt.flag, str(value)]
    return out


TEMPLATE_JOBS = ("backfill", "stream")
"""The Flex Templates whose ``metadata.json`` ``template_parameters`` writes."""

_BACKFILL_ONLY = ("source", "tenant", "acl_groups", "source_id", "max_delete_share", "reread")


def template_parameters(job: str = "backfill") -> list[dict[str, Any]]:
    """A Flex Template's ``metadata.json`` parameters, one per option of this
    table: ``backfill``: the job options (``source`` required) and every
    setting; ``stream``: ``event_source`` (required), the stream's options,
    ``model``, ``lanes`` and every setting. ``home`` is in neither (a
    template's state lives in its stores).

    Raises:
        ValueError: ``job`` is not one of ``TEMPLATE_JOBS``.
    """
    if job == "backfill":
        chosen = [o for o in JOB_OPTIONS if o.name != "lanes"]
        required = "source"
    elif job == "stream":
        chosen = [*STREAM_OPTIONS, *(o for o in JOB_OPTIONS if o.name not in _BACKFILL_ONLY)]
        required = "event_source"
    else:
        raise ValueError(f"unknown template job {job!r}: one of {', '.join(TEMPLATE_JOBS)}")
    return [
        {
            "name": o.name,
            "label": o.name.replace("_", " ").capitalize(),
            "helpText": o.help,
            "isOptional": o.name != required,
        }
        for o in (*chosen, *SETTING_OPTIONS)
        if o.name != "home"
    ]


def option(name: str) -> Option:
    """The option called ``name``.

    Raises:
        KeyError: no such option.
    """
    return _BY_NAME[name]
