"""The Kafka-protocol gateway: unmodified Kafka clients read the archive through it.

``protocol`` (frames, kio codecs, pure), ``rewrite`` (broker addresses and API versions, pure),
``connection`` (one client connection, in order, bounded in flight), ``upstream`` (pipelined broker
connections), ``listeners`` (a port per broker), ``fetch_answers`` (Fetch from the archive and the
broker), ``fetch_access`` (topic names, the client's right to read), ``fetch_walk`` (a broker's
Fetch answer walked without copies), ``list_offsets`` (ListOffsets answers and the brokers' offsets),
``prefetch`` (read-ahead), ``state`` (what the answers share, the read mode). Built from the
settings by processor/wiring/gateway.py; a new Kafka API gets its key in processor/kafka/api_keys.py
and its version cap in ``protocol.GATEWAY_MAX_VERSIONS``, and ``connection`` dispatches it."""
