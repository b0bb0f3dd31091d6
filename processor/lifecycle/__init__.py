"""What happens to archived segments after the copy: remote retention (``retention_policy``, pure,
per topic through ``retention_config``), the leader's retention pass (``retention_service``), the
deleter in KIP-405's order (``segment_deleter``, ``deletion_topic``), the sweep of abandoned
multipart uploads, offload-now and the remote log gauges. A new retention rule goes in
``retention_policy``; the worker's tasks are built in processor/wiring/lifecycle.py."""
