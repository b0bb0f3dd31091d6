"""The HTTP surface: health, readiness, metrics and the read API (handlers shared by the worker's
Faust web server and the read-only follower's aiohttp server)."""
