"""Dataflow Flex Template entry point of the long-running stream.

The launcher runs ``python stream_main.py --event_source=pubsub
--pubsub_subscription=projects/P/subscriptions/S --runner=DataflowRunner
--project=... ...`` (or ``--event_source=kafka --kafka_topic=T
--kafka_bootstrap=H:9092``): one flag per parameter of ``metadata.json`` plus
Beam's options, all handed to ``beam_pipelines.template.run_stream_template``
(``--streaming`` is added). Regenerate ``metadata.json`` with
``python -m beam_pipelines.template --metadata stream > templates/dataflow_stream/metadata.json``.
"""

import sys

from beam_pipelines.template import run_stream_template

if __name__ == "__main__":
    sys.exit(run_stream_template(sys.argv[1:]))
