"""``processor audit``: a scrubber of the archive, as a Spark Structured Streaming query.

- ``run``: the query and its passes (:func:`run.run_audit`, :class:`run.AuditOptions`);
- ``rules``: what is a finding, from what the project's fold says of each partition (pure);
- ``problems``: open problems across passes and the scrub position, kept in one atomic file;
- ``scrub``: which segments a pass checks, within its byte and request quotas;
- ``storage``: the object checks (sizes, CRCs, counts, orphans) run in Spark tasks.

The command that runs it is processor/commands/audit.py.
"""
