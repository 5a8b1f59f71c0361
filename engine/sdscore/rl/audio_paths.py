"""Which server-local audio paths `sdscore serve` may read: none, unless folders were allowed.

A client's path is resolved first (``..`` collapsed, every symlink followed, relative paths taken
from the server's working folder) and only then checked against the allowed folders (themselves
resolved once, at start-up). A path outside them, or any path when no folder is allowed, gets
the same refusal whether or not it exists, so the server cannot be used to probe its file system.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from sdscore.errors import SdscoreError


class AudioPathRefused(SdscoreError):
    """A client's audio path that the server will not read (paths off, or outside the allowed folders)."""


class AudioPathMissing(SdscoreError):
    """A client's audio path inside an allowed folder that is not a regular file."""


class AllowedFolderError(SdscoreError):
    """An `--allow-paths` folder that does not exist or is not a folder."""


@dataclass(frozen=True)
class AudioPathPolicy:
    """`roots`: resolved folders under which paths may be read; empty: no path is read."""

    roots: tuple[str, ...] = ()

    @classmethod
    def allowing(cls, folders: Iterable[str | os.PathLike]) -> AudioPathPolicy:
        roots = []
        for folder in folders:
            real = os.path.realpath(os.fspath(folder))
            if not os.path.isdir(real):
                raise AllowedFolderError(f"--allow-paths {os.fspath(folder)}: not an existing folder")
            roots.append(real)
        return cls(tuple(dict.fromkeys(roots)))

    def resolve(self, path: str | os.PathLike, where: str) -> str:
        """The real path to read for `path`; AudioPathRefused / AudioPathMissing otherwise."""
        if not self.roots:
            raise AudioPathRefused(f"{where}: this server reads no server-local audio paths (start it with "
                                   f"--allow-paths DIR to allow some); send the audio as base64")
        refused = AudioPathRefused(f"{where}: this server reads audio paths only under its --allow-paths "
                                   f"folders; send the audio as base64")
        try:
            real = os.path.realpath(os.fspath(path))
            inside = any(os.path.commonpath([real, root]) == root for root in self.roots)
        except (ValueError, TypeError, OSError):  # an embedded NUL, a mix of str and bytes, ...
            raise refused from None
        if not inside:
            raise refused
        if not os.path.isfile(real):  # missing, a folder, a FIFO or a device: nothing to decode
            raise AudioPathMissing(f"{where}: no such audio file under the allowed folders: {os.fspath(path)}")
        return real
