"""What happens to archived segments after the copy: remote retention (``retention_policy``, pure,
per topic through ``retention_config``), the leader's retention pass (``retention_service``) and the
worker's tasks around it (``worker_tasks``), the deleter in KIP-405's order (``segment_deleter``; the
bucket reads that prove a deletion in ``deletion_evidence``, the deletion topic's retries in
``deletion_topic`` and ``deletion_retries``), operator claims (``operator_claims``), the sweep of
abandoned multipart uploads, offload-now and the remote log gauges. A new retention rule goes in
``retention_policy``; the worker's tasks are built in processor/wiring/lifecycle.py."""
