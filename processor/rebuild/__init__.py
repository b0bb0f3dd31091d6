"""Metadata rebuilt from the bucket alone: the inventory of a prefix (pure), manifests read in
parallel, the served segments decided by the metadata fold, the metadata topic republished."""
