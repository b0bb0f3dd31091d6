"""Rewriting archived segments: merging runs of adjacent small segments into one (and the pieces an
erase will share). The new segment supersedes the old ones through the metadata fold
(processor/metadata/fold_rules.py); the old ones are deleted by that proof."""
