"""The local stack for demos and tests: Apache Kafka (jars from the pinned Maven files) or Tansu, and
SeaweedFS's S3, as child processes; sample records; the secured variant (throwaway certificates,
SASL_SSL and mutual-TLS listeners, ACLs); ``processor dev truncate``. Used by ``processor dev`` and
``processor demo`` and by the test suite, never by a worker."""
