"""The ``.npz`` format's code, for :class:`fastpe._io.writers.NpzWriter` (see that module for
the bytes): a stored (uncompressed) ZIP64 archive, the entry ``spec`` first, then one ``.npy``
member per entry, streamed.  Imported on first use, so that a command writing ``.npy`` does
not compile it.
"""

from __future__ import annotations

import errno
import os
import stat
import zipfile

import numpy as np

from .writers import SPEC_ENTRY, Layout, _check_names, _npy_bytes, _npy_header, _read_npy_header, spec_text

#: ZIP timestamps are fixed so that a spec always gives the same bytes (1980-01-01, the
#: earliest date a ZIP header can hold)
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
_ZIP_MODE = (stat.S_IFREG | 0o644) << 16


def _zip_size(members: list[tuple[str, int, bool]]) -> int:
    """The size of a stored ZIP archive holding ``members`` ``(name, size, force_zip64)`` in
    order, as :mod:`zipfile` writes it to a seekable file (no data descriptors): local
    headers (with a ZIP64 extra when forced or large), data, the central directory (with a
    ZIP64 extra for sizes or offsets past ``zipfile.ZIP64_LIMIT``) and the end records."""
    limit = zipfile.ZIP64_LIMIT  # read at each call: tests lower it
    offset = 0
    central = 0
    for name, size, force in members:
        encoded = len(name.encode("utf-8"))
        zip64 = force or size * 1.05 > limit
        header_offset = offset
        offset += 30 + encoded + (20 if zip64 else 0) + size
        extra = (2 if size > limit else 0) + (1 if header_offset > limit else 0)
        central += 46 + encoded + (4 + 8 * extra if extra else 0)
    end = 22
    if len(members) > zipfile.ZIP_FILECOUNT_LIMIT or offset > limit or central > limit:
        end += 56 + 20  # the ZIP64 end record and its locator
    return offset + central + end


def layout(writer, entries, spec) -> Layout:
    entries = tuple(entries)
    _check_names(entries, (SPEC_ENTRY,))
    headers = tuple(_npy_header(e.dtype, e.shape) for e in entries)
    text = spec_text(spec)
    spec_npy = _npy_bytes(np.array(text))
    size = _zip_size([(SPEC_ENTRY + ".npy", len(spec_npy), False)]
                     + [(e.name + ".npy", len(h) + e.nbytes, True) for e, h in zip(entries, headers)])
    return Layout(writer, entries, spec, text, size, headers=headers, spec_npy=spec_npy)


def write_data(writer, f, layout, blocks) -> None:
    feed = writer._blocks(blocks)
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        spec_info = zipfile.ZipInfo(SPEC_ENTRY + ".npy", date_time=_ZIP_EPOCH)
        spec_info.external_attr = _ZIP_MODE
        archive.writestr(spec_info, layout.spec_npy)
        for entry, header in zip(layout.entries, layout.headers):
            info = zipfile.ZipInfo(entry.name + ".npy", date_time=_ZIP_EPOCH)
            info.external_attr = _ZIP_MODE
            info.file_size = len(header) + entry.nbytes
            with archive.open(info, "w", force_zip64=True) as member:
                member.write(header)
                for data in feed.of(entry):
                    member.write(data)
        feed.finish()


def stored(writer, path, name):
    try:
        with zipfile.ZipFile(path) as archive:
            if name + ".npy" not in archive.namelist():
                raise ValueError(f"{path} holds no {name!r} entry")
            with archive.open(name + ".npy") as member:
                return _read_npy_header(member, f"{path}'s {name!r} entry")
    except (OSError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path} is not a readable .npz file: {exc}") from None


def entries(writer, path):
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.namelist()
    except (OSError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path} is not a readable .npz file: {exc}") from None
    return [m[: -len(".npy")] for m in members if m.endswith(".npy") and m != SPEC_ENTRY + ".npy"]


def open_entry(writer, path, name):
    try:
        with np.load(path, allow_pickle=False) as archive:
            return archive[name]
    except KeyError:
        raise ValueError(f"{path} holds no {name!r} entry") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: its {name!r} entry cannot be read: {' '.join(str(exc).split())}") from None


def read_spec(writer, path):
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, f"{path} does not exist")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path} is not a readable .npz file: {exc}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{path} holds a single array, not an .npz archive")
    with archive:
        if SPEC_ENTRY not in archive.files:
            raise ValueError(f"{path} holds no {SPEC_ENTRY!r} entry (not written by fastpe?)")
        try:
            value = archive[SPEC_ENTRY]
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{path}: its {SPEC_ENTRY!r} entry cannot be read: {exc}") from None
    if not (isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind == "U"):
        raise ValueError(f"{path}: its {SPEC_ENTRY!r} entry is not a JSON string")
    return str(value[()])
