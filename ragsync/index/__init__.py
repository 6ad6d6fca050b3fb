"""Index clients: one interface per store kind, a local and a production
implementation of each (see ``base.py``)."""
