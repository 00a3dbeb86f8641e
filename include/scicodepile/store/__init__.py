"""Object store: one interface, a local-folder and an S3 (minio) backend, chosen by settings."""

from __future__ import annotations

from scicodepile.settings import Settings
from scicodepile.store.base import InvalidKey, LocalObjectStore, ObjectInfo, ObjectNotFound, ObjectStore

__all__ = ["InvalidKey", "LocalObjectStore", "ObjectInfo", "ObjectNotFound", "ObjectStore", "open_store"]


def open_store(settings: Settings, *, check: bool = True) -> ObjectStore:
    """The store named by ``settings.store_backend``; with ``check`` fail early and clearly."""
    if settings.store_backend == "s3":
        from scicodepile.store.s3 import S3ObjectStore

        store: ObjectStore = S3ObjectStore(settings)
    else:
        store = LocalObjectStore(settings.resolved_store_root)
    if check:
        store.check()
    return store
