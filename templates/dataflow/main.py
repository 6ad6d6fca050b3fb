"""Dataflow Flex Template entry point.

The launcher runs ``python main.py --source=gs://bucket/prefix --tenant=acme
--acl_groups=staff --runner=DataflowRunner --project=... ...``: one flag per
parameter of ``metadata.json`` plus Beam's options, all handed to
``beam_pipelines.template.run``. Regenerate ``metadata.json`` with
``python -m beam_pipelines.template --metadata > templates/dataflow/metadata.json``.
"""

import sys

from beam_pipelines.template import run

if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
