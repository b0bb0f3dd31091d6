"""The composition root: every part is built here from ``Settings`` (the commands read them), and
this is the only package that knows Faust.

- the processes: ``worker`` (:class:`Worker`: builds the leader, follower, lifecycle and web parts,
  starts them in order, runs Faust, closes everything in reverse), ``follower_server`` (``processor
  follower``: follower + reader + aiohttp, no Faust), ``bucket_follower`` (``--from-bucket``, a read
  replica of the bucket alone), ``gateway_server`` (``processor gateway``);
- what the commands build: ``read_side`` (:func:`open_read_side`, the read commands' follower and
  reader), ``deletion_context`` (the deleting commands' connections, follower, claim and deleter);
- the parts, one job each: ``storage`` (S3 storage from the settings), ``encryption`` (key providers
  from the settings), ``data_dir`` (one process per data directory), ``startup`` (start-up checks),
  ``follower`` (follower and reader), ``resume`` (resume loader and planner), ``read_your_write``
  (the copier's read-your-write policy), ``fetch_sizes`` (fetch-size arithmetic), ``leader`` (the
  offload engine), ``lifecycle`` (retention and multipart sweep tasks), ``readiness`` (probes),
  ``gateway`` (the gateway's listeners), ``spark_connection`` (the Spark sources' connection, for
  processor/spark_sources/entry.py);
- the Faust parts: ``faust_app`` (the app), ``faust_transport`` (the leadership transport),
  ``rebalance`` (rebalance callbacks), ``timers`` (periodic tasks), ``faust_views`` (HTTP views).
"""
