"""The composition root: builds the worker, the read-only follower and the CLI's read side from
``Settings``, and is the only package that knows Faust.

- :mod:`.worker`: :class:`Worker`, which builds the leader, follower, lifecycle and web parts,
  starts them in order, runs Faust and closes everything in reverse;
- :mod:`.follower_server`: ``processor follower`` (follower + reader + aiohttp, no Faust);
- :mod:`.read_side`: :func:`open_read_side`, the one read-side factory of the CLI commands;
- the parts, one job each: ``storage`` (S3 factory), ``startup`` (start-up checks), ``follower``
  (follower and reader), ``resume`` (resume loader and planner), ``read_your_write`` (the copier's
  read-your-write policy), ``fetch_sizes`` (fetch-size arithmetic), ``leader`` (the offload
  engine), ``lifecycle`` (retention, multipart sweep), ``readiness`` (probes), and the Faust parts:
  ``faust_app`` (the app), ``faust_transport`` (the leadership transport), ``rebalance``
  (rebalance callbacks), ``timers`` (periodic tasks), ``faust_views`` (HTTP views on Faust).
"""
