"""The follower: the metadata topic materialized into a RocksDB cache (the read side's floor, with
``reader``). ``materializer`` consumes the topic into ``metadata_cache``, whose key layout
(``cache_keys``), write path through the one metadata fold (``cache_writes``) and queries
(``cache_queries``) are its own modules; ``remote_log_metadata_manager`` is KIP-405's RLMM API over it."""
