"""Tiered storage for Apache Kafka, run as a stream processor.

Packages by floor, each importing only the floors below it (ARCHITECTURE.md "Layout";
``lint-imports`` checks it):
  cli.py      the ``processor`` command: parses arguments, imports and runs one command
  commands/   one module per command; the only code that reads the environment (load_settings)
  spark_sources/ the Spark data sources as Spark starts them (spark_sources/entry.py reads their
              settings): their composition root
  wiring/     the composition root: builds every part from Settings; the only package that knows Faust
  config/     Settings: the PROCESSOR_* variables
  roles:
    leader/     the offload path: batch source, assembly, offload buffer, rolling, the copier
    lifecycle/  retention, the deleter, the multipart sweep, offload-now
    gateway/    the Kafka-protocol gateway in front of the brokers
    web/        the HTTP surface: health, metrics, the read API
    spark/      what the Spark data sources read with, and the audit
    restore/    archived records back into Kafka, exactly once
    rebuild/    the metadata topic rebuilt from the bucket
    rewrite/    archived segments rewritten: merges of small segments, erasures of keys
    devstack/   the local stack (Apache Kafka or Tansu, SeaweedFS) for demos and tests
  read side:
    reader/     remote reads by offset and by timestamp
    follower/   the metadata cache in RocksDB and the RLMM API over it
  metadata/   the KIP-405 model and state machine, the Avro codec, the fold, the topic I/O
  storage/    the ChunkStorage contract and its S3 and filesystem backends
  crypto/     encryption at rest: key providers behind one interface
  kafka/      the Kafka edge: clients, admin, security, OAUTHBEARER, the partition type, API keys
  segment/    pure byte formats by version: records, blocks, the index object, object keys
  base:       probes.py, health.py, metrics.py, logs.py, runtime.py, units.py, errors.py
"""

__version__ = "0.1.0"
