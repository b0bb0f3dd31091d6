"""What a listing of the bucket prefix holds, segment by segment. Pure.

Every archived segment has three objects side by side: the data object
(``{start:020d}-{uuid}-e{epoch}.log``), its index (``...log-index``) and its manifest
(``...log-manifest``, :mod:`processor.metadata.manifest`). The inventory groups a listing by data
object key and sorts the groups into

- *complete* segments: all three objects, with the manifest to be read;
- *objects without a manifest*: data or index objects nobody described (an upload that failed
  before its manifest, a zombie's leftovers, a deletion that stopped after removing the manifest);
  never served by a rebuild;
- *manifests without objects*: a manifest whose data or index object is gone; never served.

Other objects under the prefix (restore offset maps, anything else) are not segment objects and are
left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from processor.segment.object_keys import INDEX_SUFFIX, KEY_FILTER_SUFFIX, MANIFEST_SUFFIX

_SEGMENT_NAME = re.compile(
    r"(?:^|/)\d{20}-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-e\d+\.log$"
)


@dataclass
class SegmentObjects:
    data_key: str
    data_size: int | None = None
    index_size: int | None = None
    manifest_size: int | None = None
    key_filter_size: int | None = None  # optional: a segment is complete without one

    @property
    def manifest_key(self) -> str:
        return self.data_key + MANIFEST_SUFFIX

    @property
    def index_key(self) -> str:
        return self.data_key + INDEX_SUFFIX


@dataclass
class Inventory:
    complete: list[SegmentObjects] = field(default_factory=list)
    without_manifest: list[SegmentObjects] = field(default_factory=list)
    manifest_without_objects: list[SegmentObjects] = field(default_factory=list)
    other_objects: int = 0


def take_inventory(listing: Iterable[tuple[str, int]]) -> Inventory:
    """``listing``: (key, size) of every object under the prefix, in any order."""
    groups: dict[str, SegmentObjects] = {}
    inventory = Inventory()
    for key, size in listing:
        if key.endswith(MANIFEST_SUFFIX):
            base, slot = key[: -len(MANIFEST_SUFFIX)], "manifest_size"
        elif key.endswith(INDEX_SUFFIX):
            base, slot = key[: -len(INDEX_SUFFIX)], "index_size"
        elif key.endswith(KEY_FILTER_SUFFIX):
            base, slot = key[: -len(KEY_FILTER_SUFFIX)], "key_filter_size"
        else:
            base, slot = key, "data_size"
        if not _SEGMENT_NAME.search(base):
            inventory.other_objects += 1
            continue
        setattr(groups.setdefault(base, SegmentObjects(base)), slot, size)
    for base in sorted(groups):
        objects = groups[base]
        if objects.manifest_size is None:
            inventory.without_manifest.append(objects)
        elif objects.data_size is None or objects.index_size is None:
            inventory.manifest_without_objects.append(objects)
        else:
            inventory.complete.append(objects)
    return inventory
