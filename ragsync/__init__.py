"""ragsync core: the element model, identities, parsing, chunking, catalog and
store clients. Plain Python; nothing in this package imports Apache Beam."""

__version__ = "0.1.0"
