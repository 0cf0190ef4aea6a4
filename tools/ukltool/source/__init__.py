"""The pinned sources (sources.lock) and the patch series applied to them."""
