"""What a fresh page-cache page costs on this machine: pwrite into new files, no store.

Writes ``--files`` files of 64 MiB, 1 MiB per ``pwrite``, and prints the cost
per MiB every 8 files (512 MiB). With ``--keep-files N`` each file more than N
files back is flushed and dropped from the page cache (``POSIX_FADV_DONTNEED``)
as the writer goes, the way the store's page-cache window does
(services/store/page_cache.py); 0 keeps every file cached until the end. Files
go to a temporary directory under ``--dir`` and are deleted afterwards.

    .venv/bin/python -m bench.fresh_pages [--files 96] [--keep-files 0] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

FILE_BYTES = 64 * 2**20
WRITE_BYTES = 2**20
REPORT_EVERY_FILES = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=96)
    parser.add_argument("--keep-files", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    if args.files < 1 or args.keep_files < 0:
        parser.error("--files must be >= 1 and --keep-files >= 0")
    if not args.dir.is_dir():
        parser.error(f"--dir {args.dir} is not a directory")
    root = Path(tempfile.mkdtemp(prefix="fresh-pages-", dir=args.dir))
    data = os.urandom(WRITE_BYTES)
    paths: list[Path] = []
    try:
        for n in range(args.files):
            path = root / f"{n:05d}"
            paths.append(path)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, FILE_BYTES)
                started = time.perf_counter()
                for position in range(0, FILE_BYTES, WRITE_BYTES):
                    os.pwrite(fd, data, position)
                seconds = time.perf_counter() - started
                os.fdatasync(fd)
            finally:
                os.close(fd)
            if args.keep_files and n >= args.keep_files:
                _drop(paths[n - args.keep_files])
            if n % REPORT_EVERY_FILES == 0:
                print(
                    f"{n * FILE_BYTES // 2**20:>7,} MiB written: "
                    f"{seconds * 1000 / (FILE_BYTES // WRITE_BYTES):.3f} ms per MiB",
                    flush=True,
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _drop(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
