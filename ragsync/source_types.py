"""The kinds of source ragsync knows, defined once for every layer.

``SOURCE_TYPES`` names the connector families (``connectors.registry``
maps each to its class; the catalog, the CLI's ``sources add --type`` and
the API's ``POST /v1/sources`` accept exactly these). ``SYNC_KINDS`` says
how ``ragsync serve`` keeps a source current: ``webhook`` (changes arrive as
events) or ``poll`` (listed every ``poll_interval_s``).

Adding a connector: add its type here and its class to
``connectors.registry.CONNECTORS`` (a test checks the two agree).
"""

from __future__ import annotations

SOURCE_TYPES: tuple[str, ...] = ("object_store", "wiki", "drive", "tickets")
SYNC_KINDS: tuple[str, ...] = ("webhook", "poll")
