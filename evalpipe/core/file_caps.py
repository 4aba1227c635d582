"""Size caps on the files evalpipe reads: one place that reads data files, logs and archives without letting a
hostile one (a zip bomb in an Inspect `.eval` log, a gzip that inflates to gigabytes, `/dev/zero` named as a
dataset) take the process's memory (docs/operations.md "Size caps on files read").

A cap is a number of bytes: the most uncompressed bytes read from one file. For a zip archive it bounds each
member and all members together, checked against the central directory BEFORE anything is inflated; reads go
through bounded readers as well, so a header that lies about a size still cannot get past the cap. Going over is
a one-line `FileTooLarge` naming the file (and member), the cap, and how to raise it (`FileCap.how_to_raise`:
the option or flag of whoever set the cap).
"""
from __future__ import annotations

import gzip
import io
import os
import zipfile
from dataclasses import dataclass
from typing import Any, BinaryIO, TextIO

from evalpipe.core.errors import ConfigError, DataError

MB = 1 << 20
DEFAULT_MAX_FILE_MB = 512  # a few hundred MB: far above any real dataset row file or log, far below the RAM it takes
OPTION = "max_file_mb"
_CHUNK = 1 << 20


class FileTooLarge(DataError):
    """A file (or an archive member) holds more than the cap allows."""


def _mb(n: int) -> str:
    return f"{n / MB:.1f} MB" if n < 10 * MB else f"{n / MB:,.0f} MB"


@dataclass(frozen=True)
class FileCap:
    """The most uncompressed bytes read from one file, and how the user raises it (e.g. "the split option
    `max_file_mb`")."""

    max_bytes: int = DEFAULT_MAX_FILE_MB * MB
    how_to_raise: str = f"the option `{OPTION}`"

    @classmethod
    def from_option(cls, value: Any, how_to_raise: str, where: str = "") -> "FileCap":
        """The cap a `max_file_mb` setting gives (None: the default); anything but a positive number of MB is a
        ConfigError naming `where`."""
        if value is None:
            return cls(DEFAULT_MAX_FILE_MB * MB, how_to_raise)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value != value:
            raise ConfigError(f"{where + ': ' if where else ''}{OPTION} must be a positive number of megabytes "
                              f"(default {DEFAULT_MAX_FILE_MB}), not {value!r}")
        return cls(int(value * MB), how_to_raise)

    def refuse(self, shown: Any, size: int | None, member: str | None = None, what: str = "") -> FileTooLarge:
        where = f"{shown}" + (f": member {member}" if member else "")
        amount = f"{_mb(size)}, over the" if size is not None else "more than the"
        return FileTooLarge(f"{where} {what or 'holds'} {amount} {_mb(self.max_bytes)} size cap on files read; if "
                            f"you trust the file, raise {self.how_to_raise} (in MB)")


DEFAULT_CAP = FileCap()


class _Bounded(io.RawIOBase):
    """A raw stream that raises FileTooLarge once more than the cap has been read from `inner`."""

    def __init__(self, inner: Any, cap: FileCap, shown: Any, member: str | None, what: str):
        self._inner, self._cap, self._shown, self._member, self._what = inner, cap, shown, member, what
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        want = min(len(buf), self._cap.max_bytes + 1 - self.count)
        data = self._inner.read(max(want, 1))
        n = len(data)
        self.count += n
        if self.count > self._cap.max_bytes:
            raise self._cap.refuse(self._shown, None, self._member, self._what)
        buf[:n] = data
        return n

    def seekable(self) -> bool:
        return bool(getattr(self._inner, "seekable", lambda: False)())

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.count = self._inner.seek(offset, whence)  # (a gzip stream's positions are inflated bytes too)
        return self.count

    def tell(self) -> int:
        return self.count

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


def _shown(path: Any, shown: Any) -> Any:
    return path if shown is None else shown


def check_size(path: str | os.PathLike, cap: FileCap = DEFAULT_CAP, shown: Any = None) -> int:
    """The file's size on disk, refused when over the cap (before anything is read)."""
    size = os.stat(path).st_size
    if size > cap.max_bytes:
        raise cap.refuse(_shown(path, shown), size)
    return size


def open_binary(path: str | os.PathLike, cap: FileCap = DEFAULT_CAP, shown: Any = None,
                decompress: bool | None = None) -> BinaryIO:
    """The file's bytes as a stream that stops at the cap. A gzip file (`.gz`, or `decompress=True`) is inflated,
    the cap counting the inflated bytes. The size on disk is checked first; the bounded reader catches what a
    size can't tell (a device, a pipe, a file growing, a gzip's ratio)."""
    shown = _shown(path, shown)
    check_size(path, cap, shown)
    raw: Any = open(path, "rb")
    what = ""
    if decompress or (decompress is None and str(path).endswith(".gz")):
        raw, what = gzip.GzipFile(fileobj=raw, mode="rb"), "inflates to"
    return io.BufferedReader(_Bounded(raw, cap, shown, None, what), buffer_size=_CHUNK)  # type: ignore[return-value]


def open_text(path: str | os.PathLike, cap: FileCap = DEFAULT_CAP, shown: Any = None, encoding: str = "utf-8",
              errors: str = "strict", newline: str | None = None, decompress: bool | None = None) -> TextIO:
    """`open_binary` decoded as text (the arguments of `open`)."""
    return io.TextIOWrapper(open_binary(path, cap, shown, decompress), encoding=encoding, errors=errors,
                            newline=newline)


def read_bytes(path: str | os.PathLike, cap: FileCap = DEFAULT_CAP, shown: Any = None,
               decompress: bool | None = None) -> bytes:
    with open_binary(path, cap, shown, decompress) as fh:
        return fh.read()


def read_text(path: str | os.PathLike, cap: FileCap = DEFAULT_CAP, shown: Any = None, encoding: str = "utf-8",
              decompress: bool | None = None) -> str:
    return read_bytes(path, cap, shown, decompress).decode(encoding)


def file_sha256(path: str | os.PathLike, cap: FileCap = DEFAULT_CAP, shown: Any = None) -> str:
    """SHA-256 of the file's bytes as stored (not inflated), read in chunks under the cap."""
    import hashlib

    h = hashlib.sha256()
    with open_binary(path, cap, shown, decompress=False) as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def check_zip(zf: zipfile.ZipFile, cap: FileCap = DEFAULT_CAP, shown: Any = None) -> int:
    """Each member's and all members' uncompressed sizes (the central directory's) against the cap; the total.
    Python's zipfile then never inflates a member past its recorded size (a lying size fails its CRC check)."""
    shown = _shown(zf.filename, shown)
    total = 0
    for info in zf.infolist():
        if info.file_size > cap.max_bytes:
            raise cap.refuse(shown, info.file_size, info.filename, "inflates to")
        total += info.file_size
    if total > cap.max_bytes:
        raise cap.refuse(shown, total, None, f"({len(zf.infolist())} members) inflates to")
    return total


def open_zip(path: str | os.PathLike, cap: FileCap = DEFAULT_CAP, shown: Any = None) -> zipfile.ZipFile:
    """The archive, its sizes checked (`check_zip`) and the archive itself read into memory under the cap, so
    what is checked is what is read."""
    shown = _shown(path, shown)
    try:
        zf = zipfile.ZipFile(io.BytesIO(read_bytes(path, cap, shown, decompress=False)))
    except zipfile.BadZipFile as exc:
        raise DataError(f"{shown}: not a zip archive ({exc})") from None
    check_zip(zf, cap, shown)
    return zf


def read_member(zf: zipfile.ZipFile, name: str | zipfile.ZipInfo, cap: FileCap = DEFAULT_CAP,
                shown: Any = None) -> bytes:
    """One member's bytes, through a bounded reader (whatever its header says)."""
    member = name.filename if isinstance(name, zipfile.ZipInfo) else name
    with zf.open(name) as inner, io.BufferedReader(_Bounded(inner, cap, _shown(zf.filename, shown), member,
                                                            "inflates to")) as fh:
        return fh.read()


# The config file itself (evals.yaml): no option raises it (it is read before any option is); a real config is a few
# KB, so a file over this is a wrong path (EVALS_CONFIG at a data file, a device).
CONFIG_MAX_MB = 16
CONFIG_CAP = FileCap(CONFIG_MAX_MB * MB, "nothing: check the config path (EVALS_CONFIG)")


def read_config_text(path: str | os.PathLike) -> str:
    """The config file's text under CONFIG_CAP; over it, a one-line ConfigError naming the file."""
    try:
        return read_text(path, CONFIG_CAP)
    except FileTooLarge:
        raise ConfigError(f"config file {path} is over the {CONFIG_MAX_MB} MB size cap on a config file (a real one is "
                          f"a few KB); point EVALS_CONFIG (or --config) at your evals.yaml") from None


def split_cap(split_key: str, options: dict[str, Any]) -> FileCap:
    """The cap a benchmark split's files are read under: its option `max_file_mb`."""
    return FileCap.from_option(options.get(OPTION), f"the split option `{OPTION}` of {split_key}", split_key)


def model_cap(model_key: str, options: dict[str, Any]) -> FileCap:
    """The cap a model's recorded outputs (`runner: replay`) are read under: its option `max_file_mb`."""
    return FileCap.from_option(options.get(OPTION), f"the option `{OPTION}` of model {model_key}",
                               f"model {model_key!r}")
