"""Models on disk and on the hub: the catalog of pairs, downloads (the hub, or the package
index as a fallback) and what each pair measured on this machine before (``profiles``)."""
