"""The metadata topic: the KIP-405 model (``model``) and state machine, its Avro wire codec and the
fast segment-record decoder, fencing and validation, the one fold of the topic (``fold``: the
driver; ``fold_rules`` and ``fold_claim_rules``: what is accepted, what is served; ``fold_reasons``,
``fold_state``, ``memory_store``, ``partition_header_codec``), the remote state of a partition,
deletion proofs, manifests, and the topic at the edge (``topic_io``, ``read_to_end``). Pure but for
``topic_io`` and ``read_to_end``; keyed by :class:`processor.kafka.partition.TopicPartition`."""
