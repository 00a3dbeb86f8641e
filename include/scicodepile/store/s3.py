"""S3 backend through the ``minio`` client (MinIO in production, SeaweedFS in tests)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from scicodepile.errors import ConfigError
from scicodepile.settings import Settings
from scicodepile.store.base import ObjectInfo, ObjectNotFound, ObjectStore, validate_key


class _ResponseStream:
    """File-like wrapper over a urllib3 response that releases the connection on close."""

    def __init__(self, response) -> None:
        self._response = response

    def read(self, n: int = -1) -> bytes:
        return self._response.read() if n is None or n < 0 else self._response.read(n)

    def close(self) -> None:
        self._response.close()
        self._response.release_conn()

    def __enter__(self) -> _ResponseStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class S3ObjectStore(ObjectStore):
    name = "s3"

    def __init__(self, settings: Settings) -> None:
        from minio import Minio
        from urllib3 import PoolManager, Retry, Timeout

        self.bucket = settings.s3_bucket
        self.endpoint = settings.s3_endpoint
        self._create_bucket = settings.s3_create_bucket
        # Short connect timeout and few retries: an unreachable endpoint must fail in seconds.
        http = PoolManager(
            timeout=Timeout(connect=3, read=120),
            retries=Retry(total=2, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]),
            maxsize=16,
        )
        try:
            self.client = Minio(
                settings.s3_endpoint,
                access_key=settings.s3_access_key.get_secret_value() or None,
                secret_key=settings.s3_secret_key.get_secret_value() or None,
                secure=settings.s3_secure,
                region=settings.s3_region,
                http_client=http,
            )
        except ValueError as exc:
            raise ConfigError(
                f"invalid S3 endpoint {settings.s3_endpoint!r}: {exc}", setting="SCICODEPILE_S3_ENDPOINT"
            ) from None

    def __repr__(self) -> str:  # never shows keys
        return f"S3ObjectStore(endpoint={self.endpoint!r}, bucket={self.bucket!r})"

    def check(self) -> None:
        from minio.error import S3Error
        from urllib3.exceptions import HTTPError

        try:
            exists = self.client.bucket_exists(self.bucket)
        except (HTTPError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            reason = str(reason).rsplit(": ", 1)[-1].strip("')\"") or type(exc).__name__
            raise ConfigError(
                f"S3 endpoint {self.endpoint} is unreachable: {reason}",
                setting="SCICODEPILE_S3_ENDPOINT",
            ) from None
        except S3Error as exc:
            setting = (
                "SCICODEPILE_S3_ACCESS_KEY"
                if exc.code in {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}
                else "SCICODEPILE_S3_BUCKET"
            )
            raise ConfigError(
                f"S3 refused access to bucket {self.bucket!r}: {exc.code}", setting=setting
            ) from None
        except ValueError as exc:
            raise ConfigError(
                f"invalid S3 bucket name {self.bucket!r}: {exc}", setting="SCICODEPILE_S3_BUCKET"
            ) from None
        if not exists:
            if not self._create_bucket:
                raise ConfigError(
                    f"S3 bucket {self.bucket!r} does not exist at {self.endpoint}; create it or set "
                    "SCICODEPILE_S3_CREATE_BUCKET=true",
                    setting="SCICODEPILE_S3_BUCKET",
                )
            self.client.make_bucket(self.bucket)

    def put_file(self, key: str, path: Path, content_type: str = "application/octet-stream") -> int:
        validate_key(key)
        size = Path(path).stat().st_size
        self.client.fput_object(self.bucket, key, str(path), content_type=content_type)
        return size

    def get_file(self, key: str, path: Path) -> Path:
        from minio.error import S3Error

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        os.close(fd)
        try:
            self.client.fget_object(self.bucket, validate_key(key), tmp)
            os.replace(tmp, path)
        except S3Error as exc:
            Path(tmp).unlink(missing_ok=True)
            if exc.code in {"NoSuchKey", "NoSuchObject"}:
                raise ObjectNotFound(key) from None
            raise
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def open(self, key: str) -> BinaryIO:
        from minio.error import S3Error

        try:
            return _ResponseStream(self.client.get_object(self.bucket, validate_key(key)))  # type: ignore[return-value]
        except S3Error as exc:
            if exc.code in {"NoSuchKey", "NoSuchObject"}:
                raise ObjectNotFound(key) from None
            raise

    def stat(self, key: str) -> ObjectInfo | None:
        from minio.error import S3Error

        try:
            st = self.client.stat_object(self.bucket, validate_key(key))
        except S3Error as exc:
            if exc.code in {"NoSuchKey", "NoSuchObject", "ResourceNotFound"}:
                return None
            raise
        return ObjectInfo(key, st.size or 0)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        for obj in self.client.list_objects(self.bucket, prefix=prefix or None, recursive=True):
            if not obj.is_dir:
                yield ObjectInfo(obj.object_name, obj.size or 0)

    def delete(self, key: str) -> None:
        self.client.remove_object(self.bucket, validate_key(key))

    def location(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}" if key else f"s3://{self.bucket}"
