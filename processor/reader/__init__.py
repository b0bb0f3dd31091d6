"""Remote reads (the read side's floor, with ``follower``): by offset or timestamp, records or the
archived record batches as stored (``remote_reader``), block access and the one integrity check of
a segment (``segment_blocks``, ``segment_check``), encrypted segments' keys (``segment_keys``), the
local block cache and the read API's JSON shapes. Every role that reads the archive reads it here."""
