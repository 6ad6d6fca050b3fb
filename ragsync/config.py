"""Where state lives and which stores to open: one frozen settings object.

Every pipeline step receives a ``Settings`` (it pickles to workers) and opens
its own clients in ``setup()`` with the factory functions below.

Layout of ``home`` (the local default; every path can be overridden):

    HOME/catalog.db        SQLite catalog (or ``catalog_url`` for PostgreSQL)
    HOME/milvus.db         Milvus Lite (or ``milvus_uri`` for a server)
    HOME/keyword/          tantivy index (or ``es_url`` for Elasticsearch): index version 1
    HOME/keyword_v{n}/     later keyword index versions (``ragsync.index.versions``)
    HOME/keyword.alias     names the live keyword directory; absent means ``keyword``
    HOME/objects/raw/      raw copies, keyed by content hash
    HOME/objects/parsed/   parsed elements, keyed by content hash + parser version

ONNX exports of the embedding model are kept per user, not per home
(``model_cache_dir``, default :func:`default_model_cache_dir`), so a new home
does not export the model again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ragsync.errors import ConfigurationError
from ragsync.ingest.chunking import ChunkerConfig

if TYPE_CHECKING:  # pragma: no cover
    from ragsync.catalog import Catalog
    from ragsync.parsing.archive import ArchiveLimits

DEFAULT_HOME = "./ragsync-data"

EMBED_BACKENDS = ("torch", "onnx", "onnx-int8")
"""Embedding backends (``Settings.embed_backend``); see ``ragsync.embedding.models``."""

NEW_HOME_BACKEND = "onnx-int8"
"""The backend a home without an index is built with when none is set."""

# Keyword backends (``Settings.keyword_index``; empty = ``elasticsearch`` when
# ``es_url`` is set, else ``tantivy``) are registered in ragsync.index.backends.

LEGACY_BACKEND = "torch"
"""The backend of an index whose version row names none (built before backends were recorded)."""


def default_model_cache_dir() -> str:
    """Where ONNX exports are kept when ``model_cache_dir`` is not set:
    ``$XDG_CACHE_HOME/ragsync/models``, else ``~/.cache/ragsync/models``
    (one export per user and model, shared by every home)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ragsync", "models")


def default_home() -> str:
    """``$RAGSYNC_HOME`` or ``./ragsync-data``."""
    return os.environ.get("RAGSYNC_HOME") or DEFAULT_HOME


@dataclass(frozen=True)
class Settings:
    """Everything a step needs to find its stores.

    Attributes:
        home: local state directory.
        catalog_url: SQLAlchemy URL; default SQLite under ``home``.
        milvus_uri: Milvus Lite file or server URL; default under ``home``.
        milvus_token: server token (empty for Lite).
        collection: vector collection (or alias) name.
        milvus_database: Milvus database of the vector collection and of the
            Milvus keyword index (created by ``ragsync init``/backfill);
            empty = Milvus' ``default``. One database per home lets several
            deployments share one Milvus.
        vector_index: the vector backend: ``milvus`` (Milvus Lite under
            ``home`` or the server at ``milvus_uri``; the default) or a
            registered sink (``ragsync.index.backends``).
        keyword_index: ``tantivy`` (one process: the laptop default),
            ``milvus`` (Milvus' BM25 full-text search, collection
            ``{collection}_keyword`` beside the vectors; takes writers from
            many workers) or ``elasticsearch``; empty = ``elasticsearch`` when
            ``es_url`` is set, else ``tantivy``.
        es_url: Elasticsearch URL; empty selects the embedded tantivy index.
        es_index: Elasticsearch index (or alias) name.
        object_store: root of raw and parsed copies (any Beam FileSystems
            path: local, ``gs://``, ``s3://``).
        chunker: chunk size settings.
        parse_timeout_s: wall-clock limit for parsing one document (fast lane).
        slow_parse_timeout_s: the same for the slow lane (OCR takes ~2-3 s a
            page a core).
        parse_memory_mb: address-space limit of the parse process.
        max_bytes: documents larger than this are dead-lettered ``too_large``
            (enforced while reading: never more than this is read).
        max_pages: documents with more pages (PDF pages, image frames) are
            dead-lettered ``too_large``; nothing is ever cut to fit.
        fetch_timeout_s: wall-clock limit for reading one document; over it
            the document is dead-lettered ``fetch_timeout``.
        max_archive_bytes: an archive may expand to at most this many bytes
            in total (nested archives included).
        max_archive_members: ... and hold at most this many members.
        max_archive_depth: containers (archives, e-mails) may nest this deep.
        max_archive_ratio: a member expanding to more than 1 MiB may be at
            most this many times its compressed size.
        max_children_s: wall-clock seconds the children (attachments,
            archive members) of one document may spend being parsed; the
            rest are dead-lettered ``too_large`` (keep it below
            ``parse_timeout_s``).
        embed_batch_size: largest embedding batch.
        boilerplate_min_docs: a paragraph held by this many documents of a
            source is boilerplate whatever their share of the source (0 turns
            boilerplate off); see ``ragsync.ingest.boilerplate``.
        boilerplate_share: a paragraph held by this share of a source's live
            documents, and by at least ``boilerplate.MIN_HOLDERS``, is
            boilerplate to queries: ranked below unique text, one copy shown
            (only ``boilerplate_min_docs`` holders leave it out of chunks).
        rerank: the reranking stage after fusion (``ragsync.query.rerank``):
            ``windows`` (the packaged embedding model reads each candidate
            again in windows of a few sentences), ``off``, or the directory
            of a sentence-transformers CrossEncoder (``$RAGSYNC_RERANK``).
        rerank_weight: the reranker's share of the final score (0-1; the
            fused score has the rest).
        event_lease_s: how long a read event stays hidden from other readers;
            one not acknowledged by then (its worker died) is delivered again.
        es_api_key: Elasticsearch API key (base64 ``id:key``); empty for none.
        es_username, es_password: Elasticsearch basic auth (instead of a key).

    Every field is also a pipeline option, a flag and a ``RAGSYNC_*``
    environment variable (``ragsync.options``).
        embed_model: the embedding model: a registered name
            (``all-MiniLM-L6-v2``, the default when empty) or the directory of
            a local sentence-transformers model (``$RAGSYNC_EMBED_MODEL``).
            Its dimension is read from the model files.
        embed_backend: ``torch``, ``onnx`` or ``onnx-int8``
            (``$RAGSYNC_EMBED_BACKEND``); empty (the default) = the backend the
            live index was built with (``torch`` for an index that does not
            record one), ``onnx-int8`` for a home without an index. The ONNX
            forms are exported once from the same files into
            ``model_cache_dir``. A set backend that differs from the live
            index's is refused (``ragsync.index.versions.live_spec``).
        embed_device: ``cpu``, ``cuda``, ``cuda:N``; empty = ``cuda`` when
            torch sees a GPU, else ``cpu`` (``$RAGSYNC_EMBED_DEVICE``).
        embed_max_tokens: tokens the model reads per text; 0 = the model's
            own limit (its position embeddings).
        embed_query_prefix: text put before every query (e.g. ``"query: "``
            for e5 models); None = the model's own prompt, if it declares one.
        embed_passage_prefix: the same for every chunk (``"passage: "``).
        model_cache_dir: where exported ONNX models are kept; empty =
            :func:`default_model_cache_dir`, resolved where the model loads
            (per user, shared by every home).
        vcpu_hour_usd: price of one vCPU-hour for the cost estimate
            (``ragsync.ops.cost``; env ``RAGSYNC_VCPU_HOUR_USD``).
        gpu_hour_usd: price of one GPU-hour for the cost estimate
            (env ``RAGSYNC_GPU_HOUR_USD``).
        quick_check_max_objects: the most objects ``ragsync backfill`` of a
            ``gs://``/``s3://`` prefix lists on the launcher to find out that
            nothing changed (``beam_pipelines.quick``); a source with more
            known documents, or a prefix with more objects, goes straight to
            the pipeline. 0 = never list an object store on the launcher.
        plugins: comma-separated modules imported when the settings are
            made or unpickled in a worker (``ragsync.plugins``): they
            register source types and keyword backends.
        ocr_languages: Tesseract's languages for scans and images, joined by
            ``+`` (``eng+deu+fra``; env ``RAGSYNC_OCR_LANGUAGES``). Each
            needs its traineddata on the workers (Debian:
            ``tesseract-ocr-deu``); a missing one dead-letters the scans
            ``configuration`` with the package to install. More languages
            read more letters (``über``, ``é``) and cost more CPU per page
            (README, "Scanned documents in other languages"). Part of
            ``parser_version``: a change re-parses every document once.
    """

    home: str = field(default_factory=default_home)
    catalog_url: str = ""
    milvus_uri: str = ""
    milvus_token: str = field(default="", repr=False)
    collection: str = "ragsync_chunks"
    milvus_database: str = ""
    vector_index: str = "milvus"
    keyword_index: str = ""
    es_url: str = ""
    es_index: str = "ragsync_chunks"
    object_store: str = ""
    chunker: ChunkerConfig = field(default_factory=ChunkerConfig)
    parse_timeout_s: int = 120
    slow_parse_timeout_s: int = 1800
    parse_memory_mb: int = 4096
    max_bytes: int = 256 * 1024 * 1024
    max_pages: int = 2000
    fetch_timeout_s: float = 300.0
    max_archive_bytes: int = 512 * 1024 * 1024
    max_archive_members: int = 10_000
    max_archive_depth: int = 3
    max_archive_ratio: float = 200.0
    max_children_s: float = 60.0
    embed_batch_size: int = 64
    event_lease_s: float = 300.0
    boilerplate_min_docs: int = 50
    boilerplate_share: float = 0.2
    rerank: str = field(default_factory=lambda: os.environ.get("RAGSYNC_RERANK", "windows"))
    rerank_weight: float = 0.5
    es_api_key: str = field(default="", repr=False)
    es_username: str = ""
    es_password: str = field(default="", repr=False)
    embed_model: str = field(default_factory=lambda: os.environ.get("RAGSYNC_EMBED_MODEL", ""))
    embed_backend: str = field(default_factory=lambda: os.environ.get("RAGSYNC_EMBED_BACKEND", ""))
    embed_device: str = field(default_factory=lambda: os.environ.get("RAGSYNC_EMBED_DEVICE", ""))
    embed_max_tokens: int = 0
    embed_query_prefix: str | None = None
    embed_passage_prefix: str | None = None
    model_cache_dir: str = ""
    vcpu_hour_usd: float = 0.056
    gpu_hour_usd: float = 0.35
    quick_check_max_objects: int = 100_000
    plugins: str = ""
    ocr_languages: str = "eng"

    def __post_init__(self) -> None:
        if self.plugins:
            # First: a plug-in may register the keyword backend checked below.
            from ragsync.plugins import load_plugins

            load_plugins(self.plugins)
        home = os.path.abspath(self.home)
        object.__setattr__(self, "home", home)
        if self.embed_backend and self.embed_backend not in EMBED_BACKENDS:
            raise ConfigurationError(
                f"embed_backend must be one of {', '.join(EMBED_BACKENDS)}, got {self.embed_backend!r}"
            )
        from ragsync.index.backends import keyword_backend, vector_backend

        vector_backend(self)  # each raises ConfigurationError naming the registered backends
        if self.keyword_index:
            keyword_backend(self)
        if self.keyword_index == "elasticsearch" and not self.es_url:
            raise ConfigurationError("keyword_index elasticsearch needs es_url")
        if self.embed_max_tokens < 0:
            raise ConfigurationError("embed_max_tokens must be >= 0 (0 = the model's own limit)")
        if not 0 <= self.rerank_weight <= 1:
            raise ConfigurationError(f"rerank_weight must be in [0, 1], got {self.rerank_weight}")
        if not self.rerank:
            raise ConfigurationError("rerank must be 'windows', 'off' or a CrossEncoder directory")
        if not 0 < self.boilerplate_share <= 1:
            raise ConfigurationError(f"boilerplate_share must be in (0, 1], got {self.boilerplate_share}")
        if not self.catalog_url:
            object.__setattr__(self, "catalog_url", "sqlite:///" + os.path.join(home, "catalog.db"))
        if not self.milvus_uri:
            object.__setattr__(self, "milvus_uri", os.path.join(home, "milvus.db"))
        if not self.object_store:
            object.__setattr__(self, "object_store", os.path.join(home, "objects"))
        if (
            min(
                self.parse_timeout_s,
                self.parse_memory_mb,
                self.max_bytes,
                self.max_pages,
                self.fetch_timeout_s,
            )
            <= 0
        ):
            raise ConfigurationError(
                "parse limits, max_bytes, max_pages and fetch_timeout_s must be positive"
            )
        if min(self.max_archive_bytes, self.max_archive_members, self.max_archive_depth) <= 0:
            raise ConfigurationError("archive limits must be positive")
        if not self.max_children_s > 0:
            raise ConfigurationError("max_children_s must be positive")
        if self.es_api_key and self.es_username:
            raise ConfigurationError("give es_api_key or es_username/es_password, not both")
        if self.quick_check_max_objects < 0:
            raise ConfigurationError("quick_check_max_objects must be >= 0 (0 = never)")
        if not 1 <= self.embed_batch_size <= 1024:
            raise ConfigurationError("embed_batch_size must be in 1..1024")
        from ragsync.parsing import checked_ocr_languages

        object.__setattr__(self, "ocr_languages", checked_ocr_languages(self.ocr_languages))

    def __setstate__(self, state: dict[str, object]) -> None:
        """A copy unpickled in a pipeline worker imports the plug-ins too
        (``__post_init__`` does not run there) before any step uses it."""
        self.__dict__.update(state)
        if self.plugins:
            from ragsync.plugins import load_plugins

            load_plugins(self.plugins)

    @property
    def parser_version(self) -> str:
        """The version documents are parsed under (``ragsync.parsing.parser_version``):
        the parsers' own, and the OCR languages when not the default."""
        from ragsync.parsing import parser_version

        return parser_version(self.ocr_languages)

    def archive_limits(self) -> ArchiveLimits:
        """The archive expansion limits to pass to ``ragsync.parsing.parse``."""
        from ragsync.parsing.archive import ArchiveLimits

        return ArchiveLimits(
            max_bytes=self.max_archive_bytes,
            max_members=self.max_archive_members,
            max_depth=self.max_archive_depth,
            max_ratio=self.max_archive_ratio,
            max_children_s=self.max_children_s,
        )

    @property
    def keyword_backend(self) -> str:
        """The keyword backend in use: ``keyword_index``, or ``elasticsearch``
        when ``es_url`` is set, else ``tantivy``."""
        return self.keyword_index or ("elasticsearch" if self.es_url else "tantivy")

    @property
    def keyword_collection(self) -> str:
        """The Milvus keyword index's collection (alias): ``{collection}_keyword``."""
        return f"{self.collection}_keyword"

    @property
    def reserved_locations(self) -> tuple[str, ...]:
        """ragsync's own state (home and object store): no source may read there."""
        return (self.home, self.object_store)

    def raw_uri(self, content_hash: str) -> str:
        """Object-store path of a raw copy."""
        return _join(self.object_store, "raw", content_hash[:2], content_hash)

    def parsed_uri(self, content_hash: str, parser_version: str) -> str:
        """Object-store path of a parsed element list (JSON lines)."""
        return _join(self.object_store, "parsed", content_hash[:2], f"{content_hash}.{parser_version}.jsonl")

    def ensure_home(self) -> None:
        os.makedirs(self.home, exist_ok=True)


def _join(root: str, *parts: str) -> str:
    if "://" in root:
        return root.rstrip("/") + "/" + "/".join(parts)
    return os.path.join(root, *parts)


def missing_catalog(settings: Settings) -> str | None:
    """The path of the SQLite catalog file when it does not exist (opening
    it would create it, and an empty home with it), else None (it exists, or
    the catalog is a server's)."""
    url = settings.catalog_url
    if url.startswith("sqlite:///") and not os.path.exists(url[len("sqlite:///") :]):
        return url[len("sqlite:///") :]
    return None


def require_catalog(settings: Settings) -> Settings:
    """``settings``, once their catalog is known to exist: the commands that
    only read it (query, status, reconcile, dead letters...) never create an
    empty home where a user ran them by mistake.

    Raises:
        ConfigurationError: the SQLite catalog does not exist; the message
            says where it was looked for and what to do.
    """
    path = missing_catalog(settings)
    if path is None:
        return settings
    where = settings.home if path == os.path.join(settings.home, "catalog.db") else path
    raise ConfigurationError(
        f"nothing is indexed at {where} (no catalog there): run `ragsync backfill FOLDER` first, "
        "or point --home (or RAGSYNC_HOME) at an existing home"
    )


def open_catalog(settings: Settings) -> Catalog:
    """The catalog (migrated to the current schema)."""
    from ragsync.catalog import Catalog

    if settings.catalog_url.startswith("sqlite"):
        settings.ensure_home()
    return Catalog.open(settings.catalog_url)
