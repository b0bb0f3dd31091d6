"""The Kafka API keys the processor speaks or names (the first int16 of every request). Pure.

One table for the gateway (the APIs it answers, rewrites, caps or hides) and the restore (the
requests it builds itself, :mod:`processor.restore.requests`); a new API the gateway handles gets its
key here.
"""

from __future__ import annotations

API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_FIND_COORDINATOR = 10
API_API_VERSIONS = 18
API_INIT_PRODUCER_ID = 22
API_ADD_PARTITIONS_TO_TXN = 24
API_END_TXN = 26
API_DESCRIBE_CLUSTER = 60
API_SHARE_FETCH = 78
API_SHARE_ACKNOWLEDGE = 79
