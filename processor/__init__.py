"""Tiered storage for Apache Kafka, run as a stream processor.

Folders by role:
  segment/   pure byte formats: records, blocks, the index object, object keys
  metadata/  RemoteLogSegmentMetadata, the KIP-405 state machine, the Avro wire codec, the topic I/O
  storage/   the ChunkStorage contract and its S3 and filesystem implementations
  leader/    the offload path: source consumer, offload buffer, segment rolling, the copier
  follower/  the metadata cache in RocksDB and the RLMM API over it
  reader/    remote reads by offset and by timestamp
  devstack/  the local stack (Apache Kafka or Tansu, SeaweedFS) for demos and tests
"""

__version__ = "0.1.0"
