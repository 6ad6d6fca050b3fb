"""Dataflow Flex Template entry point: the ragsync command line, unchanged.

The template launcher passes the job parameters as flags, e.g.
``backfill gs://bucket/prefix --tenant acme -- --runner=DataflowRunner ...``.
"""

import sys

from beam_pipelines.cli import main

if __name__ == "__main__":
    sys.exit(main())
