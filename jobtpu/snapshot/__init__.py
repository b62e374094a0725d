"""A job's snapshot: which files, the archive, its unpacking, and what it must not carry."""
