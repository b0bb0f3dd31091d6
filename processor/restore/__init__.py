"""Restore: archived records back into Kafka exactly once, with offset maps for moving consumer groups.

Pure parts: ``offset_map`` (format), ``progress_record`` (progress topic format), ``transaction_view``
(read_committed from markers), ``progress_log``, ``plan``, ``group_offsets``, ``produce`` (the
batches sent for a chunk), ``delivery`` (where they landed), ``requests`` (the Kafka requests it
sends, on kio), ``txn_wire`` (batches restamped, error codes).
Edges: ``archive`` (S3 reads), ``target``, ``log_reader`` and ``batch_producer`` (Kafka),
``bucket_maps`` (S3), ``group_io``, ``restorer`` and ``run`` (the loop and its wiring).
"""
