"""Where archived objects live: the ChunkStorage contract (``chunk_storage``, after Pravega) and its
backends, S3 (``s3``, its client in ``s3_client``; ``s3.s3_storage`` is the one builder) and a local
directory (``filesystem``), plus the upload rate limit. A new backend implements ``ChunkStorage``
and runs the contract suite (tests/contract/test_chunk_storage_contract.py)."""
