"""The offload data path of the partitions a worker leads: the batch source (the only code fetching
records), assembly into open segments within the offload buffer's bound, rolling, the copy
scheduler and segment copier (KIP-405's copy path, under a claim), leadership and resume planning.
``ports`` says what it needs of the follower; the wiring hands the follower over."""
