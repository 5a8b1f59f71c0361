"""Locations by URI: `s3://`, `gs://` and `file://` as well as plain paths, through pyarrow.fs.

The one low layer that manifests, audio and outputs go through when a location is not a local path.
`file://` URIs become plain paths (`normalize`), so everything local keeps its own code paths and
checks; `s3://bucket/key` and `gs://bucket/key` are objects read and written with pyarrow's
S3FileSystem / GcsFileSystem (built into pyarrow: no extra package).

Credentials come from the environment only, never from files or instance metadata:
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN (none: anonymous requests),
AWS_REGION / AWS_DEFAULT_REGION, and AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL for another endpoint
(MinIO, a local test server); GCS uses Google's default credentials (GOOGLE_APPLICATION_CREDENTIALS).
They are never logged: errors name the URI and the problem, and any credential text the store's
reply might echo is cut out of them.

Reads check that every byte the store announced arrived (a short read is an error, never a short
file). Writes of one object are atomic: the object appears whole when the upload completes.
"""

from __future__ import annotations

import functools
import io
import os
import re
import tempfile
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from sdscore.errors import SdscoreError

#: A scheme, then "://".
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
#: Object-store schemes → pyarrow's filesystem kind.
REMOTE_SCHEMES = {"s3": "s3", "gs": "gcs", "gcs": "gcs"}
_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_CHUNK = 8 << 20  # stream downloads and uploads in 8 MiB pieces
#: Bytes a ranged reader fetches on a miss: a WAV's header and chunk list fit in one request.
READ_AHEAD = 16 << 10
#: The most a ranged reader fetches ahead of a sequential reader.
MAX_READ_AHEAD = 4 << 20


class StorageError(SdscoreError, OSError):
    """An object could not be read or written: missing, access denied, unreachable, truncated.
    The message names the URI and the problem, never a credential; `strerror` is the problem alone
    (as for an OSError of a local file, so callers that name the path themselves do not repeat it)."""

    def __init__(self, message: str, problem: str | None = None):
        super().__init__(message)
        self.strerror = problem or message


def _failure(uri: str, problem: str) -> StorageError:
    return StorageError(f"{uri}: {problem}", problem)


@dataclass(frozen=True)
class ObjectInfo:
    """What the store says about one object: its size, modification time and ETag (None if not given)."""

    uri: str
    size: int
    mtime_ns: int | None
    etag: str | None

    def token(self) -> str:
        """The object's version for caches, with no byte of it read: URI + ETag + size (the store
        changes the ETag whenever the object is written), or URI + size + mtime without an ETag."""
        if self.etag:
            return f"{self.uri}|etag={self.etag}|{self.size}"
        return f"{self.uri}|{self.size}|mtime={self.mtime_ns}"


def scheme(location: str | os.PathLike) -> str | None:
    """The URI scheme of a location, lower-case ('s3', 'file', ...), None for a plain path."""
    match = _URI.match(os.fspath(location)) if isinstance(location, (str, os.PathLike)) else None
    return match.group(1).lower() if match else None


def is_remote(location) -> bool:
    """Whether a location is an object-store URI (s3://, gs://) rather than a local path or file://."""
    return isinstance(location, str) and scheme(location) in REMOTE_SCHEMES


def normalize(location: str | os.PathLike) -> str:
    """A local path for a plain path or a `file://` URI; an object-store URI as given.

    Other schemes (http://, hdfs://, ...) are refused: sdscore fetches nothing it does not store."""
    text = os.fspath(location)
    kind = scheme(text)
    if kind is None or kind in REMOTE_SCHEMES:
        return text
    if kind == "file":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise StorageError(f"{text}: a file:// URI must name a local path (file:///path), not host "
                               f"{parts.netloc!r}")
        return unquote(parts.path) or "/"
    raise StorageError(f"{text}: unsupported location scheme '{kind}://'; use a local path, file://, s3:// or gs://")


def split_uri(uri: str) -> tuple[str, str]:
    """(filesystem kind, 'bucket/key') of an object-store URI; StorageError without a bucket."""
    kind = REMOTE_SCHEMES.get(scheme(uri) or "")
    if kind is None:
        raise _failure(uri, "not an object-store URI (s3:// or gs://)")
    path = uri.split("://", 1)[1]
    if not path.split("/", 1)[0]:
        raise _failure(uri, f"no bucket in the URI (expected {scheme(uri)}://BUCKET/KEY)")
    return kind, path


def join(base: str, name: str) -> str:
    """`base` + '/' + `name` for URIs (no doubled slash)."""
    return base.rstrip("/") + "/" + name.lstrip("/")


def parent(uri: str) -> str:
    """The URI of the 'folder' holding an object ('s3://b/x/y.parquet' → 's3://b/x')."""
    head, _, _ = uri.rstrip("/").rpartition("/")
    return head if "://" in head and head.split("://", 1)[1] else uri.rstrip("/")


def basename(uri: str) -> str:
    return uri.rstrip("/").rpartition("/")[2]


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def _s3_settings() -> tuple:
    """The S3 settings the environment gives (a hashable tuple: one filesystem per distinct set)."""
    endpoint = _env("AWS_ENDPOINT_URL_S3") or _env("AWS_ENDPOINT_URL")
    return (_env("AWS_ACCESS_KEY_ID"), _env("AWS_SECRET_ACCESS_KEY"), _env("AWS_SESSION_TOKEN"),
            _env("AWS_REGION") or _env("AWS_DEFAULT_REGION"), endpoint)


@functools.lru_cache(maxsize=8)
def _s3_filesystem(settings: tuple):
    import pyarrow.fs as pafs

    access_key, secret_key, token, region, endpoint = settings
    options: dict = {"region": region or "us-east-1", "connect_timeout": 10.0, "request_timeout": 60.0}
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        options["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
        options["scheme"] = parts.scheme or "https"
    if access_key and secret_key:
        options.update(access_key=access_key, secret_key=secret_key, session_token=token)
    else:  # no keys in the environment: public objects only (never ~/.aws files or instance metadata)
        options["anonymous"] = True
    return pafs.S3FileSystem(**options)


@functools.lru_cache(maxsize=2)
def _gcs_filesystem():
    import pyarrow.fs as pafs

    return pafs.GcsFileSystem()


def filesystem(uri: str):
    """(pyarrow FileSystem, 'bucket/key') for an object-store URI, configured from the environment."""
    kind, path = split_uri(uri)
    return (_s3_filesystem(_s3_settings()) if kind == "s3" else _gcs_filesystem()), path


def _scrub(text: str) -> str:
    """Error text without any credential the environment holds (a store may echo a key id)."""
    for name in _CREDENTIAL_ENV:
        secret = _env(name)
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def storage_error(uri: str, error: BaseException, doing: str = "read") -> StorageError:
    """The StorageError for a failed request: what went wrong in a few words, and the URI."""
    text = _scrub(str(error))
    upper = text.upper()
    if isinstance(error, FileNotFoundError) or "NO_SUCH_KEY" in upper or "NOSUCHKEY" in upper:
        return _failure(uri, "no such object")
    if "NO_SUCH_BUCKET" in upper or "NOSUCHBUCKET" in upper:
        return _failure(uri, "no such bucket")
    if "ACCESS_DENIED" in upper or "ACCESSDENIED" in upper or "FORBIDDEN" in upper or re.search(r"\b403\b", text):
        return _failure(uri, f"access denied (cannot {doing} it with the credentials in the environment)")
    if "NETWORK_CONNECTION" in upper or "COULD NOT CONNECT" in upper or "TIMEOUT" in upper:
        return _failure(uri, f"cannot reach the store ({_first_line(text)})")
    return _failure(uri, f"cannot {doing} it ({_first_line(text)})")


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0] if text else "unknown error"


def _header(metadata, name: str) -> str | None:
    for key, value in (metadata or {}).items():
        key = key.decode() if isinstance(key, bytes) else key
        if key.lower() == name.lower():
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def stat(uri: str) -> ObjectInfo:
    """Size and ETag of one object (one HEAD request; its mtime too when the store gives no ETag);
    StorageError when it cannot be read."""
    fs, path = filesystem(uri)
    try:
        with fs.open_input_file(path) as handle:
            metadata, size = handle.metadata(), handle.size()
        etag = _header(metadata, "ETag")
        mtime_ns = None if etag else fs.get_file_info(path).mtime_ns  # a second request only without an ETag
    except (OSError, ValueError) as error:
        raise storage_error(uri, error) from None
    return ObjectInfo(uri, int(size), mtime_ns, etag.strip('"') if etag else None)


def exists(uri: str) -> bool:
    """Whether an object exists at uri (False for a missing one; StorageError for other failures)."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    try:
        return fs.get_file_info(path).type == pafs.FileType.File
    except (OSError, ValueError) as error:
        raise storage_error(uri, error) from None


def is_prefix(uri: str) -> bool:
    """Whether uri names a 'folder': objects exist under uri + '/'."""
    return bool(list_files(uri))


def list_files(prefix_uri: str) -> dict[str, ObjectInfo]:
    """Every object under a prefix ('folder'), recursively: relative name → ObjectInfo (no ETag)."""
    import pyarrow.fs as pafs

    fs, path = filesystem(prefix_uri)
    path = path.rstrip("/")
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise storage_error(prefix_uri, error, "list") from None
    base = prefix_uri.rstrip("/")
    return {info.path[len(path) + 1:]: ObjectInfo(join(base, info.path[len(path) + 1:]), info.size, info.mtime_ns, None)
            for info in infos if info.type == pafs.FileType.File}


def read_bytes(uri: str) -> bytes:
    """The whole object; StorageError when it is missing, denied, or fewer bytes arrive than announced."""
    fs, path = filesystem(uri)
    try:
        with fs.open_input_file(path) as handle:
            size = handle.size()
            data = handle.read()
    except (OSError, ValueError) as error:
        raise storage_error(uri, error) from None
    _check_length(uri, len(data), size)
    return bytes(data)


def _check_length(uri: str, got: int, expected: int) -> None:
    if got != expected:
        raise _failure(uri, f"truncated read: {got} of {expected} bytes arrived")


def download(uri: str, target: str | os.PathLike, info: ObjectInfo | None = None) -> ObjectInfo:
    """Copy one object to a local file, atomically (temp file + rename), checking its length
    against `info` (stat(uri) when not given)."""
    info = info or stat(uri)
    fs, path = filesystem(uri)
    target = os.fspath(target)
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=".download-", dir=os.path.dirname(os.path.abspath(target)))
    try:
        got = 0
        with os.fdopen(handle, "wb") as out:
            try:
                with fs.open_input_stream(path) as stream:
                    while chunk := stream.read(_CHUNK):
                        out.write(chunk)
                        got += len(chunk)
            except (OSError, ValueError) as error:
                raise storage_error(uri, error) from None
        _check_length(uri, got, info.size)
        os.replace(temp, target)
    finally:
        if os.path.exists(temp):
            os.remove(temp)
    return info


def write_bytes(uri: str, data: bytes) -> None:
    """Write one object (it appears whole, or not at all)."""
    fs, path = filesystem(uri)
    try:
        with fs.open_output_stream(path) as out:
            out.write(data)
    except (OSError, ValueError) as error:
        raise storage_error(uri, error, "write") from None


def upload(source: str | os.PathLike, uri: str) -> None:
    """Copy a local file to one object, streamed (a multipart upload: the object appears when it completes)."""
    fs, path = filesystem(uri)
    try:
        with open(source, "rb") as local, fs.open_output_stream(path) as out:
            while chunk := local.read(_CHUNK):
                out.write(chunk)
    except (OSError, ValueError) as error:
        if isinstance(error, OSError) and error.filename == os.fspath(source):
            raise
        raise storage_error(uri, error, "write") from None


def delete(uri: str) -> None:
    """Delete one object (a missing one is not an error)."""
    fs, path = filesystem(uri)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as error:
        raise storage_error(uri, error, "delete") from None


def remove_empty_prefix(prefix_uri: str) -> bool:
    """Remove a 'folder' that holds no object any more (the empty marker pyarrow leaves when its last
    object goes); a prefix that still holds objects is kept. Returns whether it is gone."""
    if list_files(prefix_uri):
        return False
    fs, path = filesystem(prefix_uri)
    try:
        fs.delete_dir(path.rstrip("/"))
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as error:
        raise storage_error(prefix_uri, error, "delete") from None
    return True


class RangedObject(io.RawIOBase):
    """A seekable read-only file over one object that fetches only what is read, by ranged GETs.

    A read that misses what was fetched fetches `read_ahead` bytes (at least what was asked); each
    further miss that continues where the last fetch ended doubles that (up to MAX_READ_AHEAD), as
    a kernel reads ahead of a sequential reader. A caller that knows how many bytes it is about to
    read in sequence says so with `expect(n)`, and the next miss fetches exactly that: a PCM slice
    costs one request for its header and one for its frames. The first fetch (the header) is kept.
    A failed or short read returns no bytes and sets `failure` (a decoder calling back into Python
    cannot take an exception: raise it when the decoder returns)."""

    def __init__(self, uri: str, read_ahead: int = READ_AHEAD):
        super().__init__()
        self.uri = uri
        fs, path = filesystem(uri)
        try:
            self._file = fs.open_input_file(path)
            self.size = self._file.size()
        except (OSError, ValueError) as error:
            raise storage_error(uri, error) from None
        self._pos = 0
        self._base_ahead = self._ahead = max(1, int(read_ahead))
        self._expected = 0
        self._head: tuple[int, bytes] | None = None  # the first range fetched (a header), kept
        self._last: tuple[int, bytes] | None = None  # the latest range fetched
        self.bytes_fetched = 0
        self.requests = 0
        self.failure: StorageError | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def expect(self, n_bytes: int) -> None:
        """The next reads will take about n_bytes in sequence: fetch them in one request."""
        self._expected = max(0, int(n_bytes))

    def _cached(self, want: int) -> bytes | None:
        for cached in (self._last, self._head):
            if cached is not None and cached[0] <= self._pos and self._pos + want <= cached[0] + len(cached[1]):
                start = self._pos - cached[0]
                return cached[1][start:start + want]
        return None

    def readinto(self, buffer) -> int:
        want = min(len(buffer), max(0, self.size - self._pos))
        if want == 0 or self.failure is not None:
            return 0
        data = self._cached(want)
        if data is None:
            sequential = self._last is not None and self._pos == self._last[0] + len(self._last[1])
            self._ahead = min(self._ahead * 2, MAX_READ_AHEAD) if sequential else self._base_ahead
            fetch = min(max(want, self._expected or self._ahead), self.size - self._pos)
            self._expected = 0
            try:
                fetched = self._file.read_at(fetch, self._pos)
            except (OSError, ValueError) as error:
                return self._fail(storage_error(self.uri, error))
            self.bytes_fetched += len(fetched)
            self.requests += 1
            if len(fetched) != fetch:
                return self._fail(_failure(self.uri, f"truncated read: {len(fetched)} of {fetch} bytes arrived "
                                                     f"at byte {self._pos}"))
            fetched = bytes(fetched)
            if self._head is None:
                self._head = (self._pos, fetched)
            self._last = (self._pos, fetched)
            data = fetched[:want]
        memoryview(buffer)[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def _fail(self, error: StorageError) -> int:
        self.failure = self.failure or error
        return 0

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()


def open_ranged(uri: str, read_ahead: int = READ_AHEAD) -> RangedObject:
    """A RangedObject over one object (see there); StorageError at once when it is missing or denied."""
    return RangedObject(uri, read_ahead)


__all__ = ["ObjectInfo", "REMOTE_SCHEMES", "RangedObject", "StorageError", "basename", "delete", "download", "exists", "filesystem",
           "is_prefix", "is_remote", "join", "list_files", "normalize", "open_ranged", "parent", "read_bytes",
           "remove_empty_prefix", "scheme", "split_uri", "stat", "storage_error", "upload", "write_bytes"]
