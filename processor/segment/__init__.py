"""Pure byte formats of the data and index objects. Nothing here does I/O."""
