"""Source connectors: plain Python, no Apache Beam. One module per source type.

A connector lists objects (a full listing, or changes since a cursor), fetches
one object's bytes and reads its permissions. ``transforms/`` adapts any
connector to a Beam source; no connector has Beam code of its own.
"""
