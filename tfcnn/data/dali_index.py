"""DALI's TFRecord index files: one `<offset> <size>` line per record, written beside each shard.

    python -m tfcnn.data.dali_index DIR      (indexes every shard of DIR whose index is missing or stale)

DALI's TFRecord reader (`--data_backend dali_cpu | dali_gpu`) seeks to records through an index instead
of parsing the files, which is how it splits the records between ranks. The format is the one DALI's
`tfrecord2idx` script writes, byte for byte: per record, its byte offset in the file and its size on disk
(16 bytes of length and checksums plus the payload), in decimal, separated by a space, one line each; an
empty shard has an empty index. The index of `train-00000-of-01024` is `train-00000-of-01024.idx`
(INDEX_SUFFIX), which the shard glob never matches.

`imagenet_prep.build_tfrecords` writes each shard's index as it writes the shard; this command makes them
for shards made elsewhere (TensorFlow's own converter, older tfcnn runs). It reads only each record's
8-byte length and seeks over the rest, so it streams in constant memory. No DALI needed.
"""
from __future__ import annotations

import contextlib
import glob
import os
import struct
import sys

from tfcnn.data import records
from tfcnn.options import command_parser

INDEX_SUFFIX = ".idx"
RECORD_OVERHEAD = 16  # a TFRecord is: uint64 length, uint32 crc of the length, payload, uint32 crc of the payload
INDEX_COMMAND = "python -m tfcnn.data.dali_index"


class IndexFileError(ValueError):
    """A file that is not a complete TFRecord file, or a shard without an index that describes it."""


def index_path(shard: str) -> str:
    """Where the index of `shard` lives: beside it, with INDEX_SUFFIX."""
    return shard + INDEX_SUFFIX


def index_lines(payload_sizes):
    """Yields the index lines of a shard whose records' payloads have these sizes, in file order."""
    offset = 0
    for payload in payload_sizes:
        yield f"{offset} {payload + RECORD_OVERHEAD}\n"
        offset += payload + RECORD_OVERHEAD


def record_sizes(shard: str):
    """Yields the payload size of every record of a TFRecord file, reading 8 bytes per record and seeking
    over the rest. IndexFileError naming the file when it ends inside a record (truncated, or no TFRecord)."""
    end = os.path.getsize(shard)
    with open(shard, "rb") as f:
        offset = 0
        while offset < end:
            header = f.read(8)
            if len(header) < 8:
                raise IndexFileError(f"{shard} is not a complete TFRecord file: it ends inside the header of the "
                                     f"record at byte {offset}")
            (payload,) = struct.unpack("<Q", header)
            if offset + payload + RECORD_OVERHEAD > end:
                raise IndexFileError(f"{shard} is not a complete TFRecord file: the record at byte {offset} claims "
                                     f"{payload} bytes, past the end of the file ({end} bytes)")
            offset += payload + RECORD_OVERHEAD
            f.seek(offset)
            yield payload


@contextlib.contextmanager
def atomic_index_file(path: str):
    """A text file to write an index into: written under a hidden temporary name beside `path` and renamed
    to `path` once complete, so a file with an index's name is always whole. (The hidden name is one that
    imagenet_prep's clean-up of a killed run's temporary files removes.)"""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="ascii") as f:
            yield f
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_index(shard: str) -> int:
    """Writes the index of an existing shard beside it, streaming; returns its number of records."""
    count = 0
    with atomic_index_file(index_path(shard)) as f:
        for line in index_lines(record_sizes(shard)):
            f.write(line)
            count += 1
    return count


def indexed_records(shard: str) -> int:
    """The number of records the index of `shard` lists, once it is checked to exist and to end where the
    shard ends (the index of a shard rewritten since would not). Otherwise IndexFileError naming the shard
    and the command that makes its index."""
    path = index_path(shard)
    fix = f"make the indexes with `{INDEX_COMMAND} {os.path.dirname(shard) or '.'}`"
    if not os.path.exists(path):
        raise IndexFileError(f"no DALI index for {shard} (expected {path}): {fix}")
    count, end = _count_and_end(path)
    if end != os.path.getsize(shard):
        raise IndexFileError(f"the DALI index {path} does not describe {shard}: it lists {count} records ending at "
                             f"byte {end}, the shard has {os.path.getsize(shard)} bytes (rewritten since?): {fix}")
    return count


def _count_and_end(path: str) -> tuple[int, int]:
    """(lines, end of the last record) of an index file; end -1 when its last line is not `offset size`."""
    count, last = 0, b""
    with open(path, "rb") as f:
        for line in f:
            count, last = count + 1, line
    fields = last.split()
    if not last:
        return 0, 0
    if len(fields) != 2 or not all(field.isdigit() for field in fields):
        return count, -1
    return count, int(fields[0]) + int(fields[1])


def is_current(shard: str) -> bool:
    """Whether `shard` has an index that describes it."""
    try:
        indexed_records(shard)
    except IndexFileError:
        return False
    return True


def shards_in(data_dir: str) -> list[str]:
    """Every train and validation shard of `data_dir`, sorted."""
    return sorted(path for split in records.SPLITS
                  for path in glob.glob(os.path.join(data_dir, records.shard_pattern(split))))


def index_directory(data_dir: str, log=print) -> dict:
    """Writes the index of every shard of `data_dir` whose index is missing or stale; returns the counts
    {'shards', 'written', 'up_to_date'}. IndexFileError when the directory holds no shards."""
    shards = shards_in(data_dir)
    if not shards:
        patterns = " or ".join(records.shard_pattern(split) for split in records.SPLITS)
        raise IndexFileError(f"no shards in {data_dir}: nothing matches {patterns}")
    stale = [shard for shard in shards if not is_current(shard)]
    for shard in stale:
        log(f"{index_path(shard)}: {write_index(shard)} records")
    return {"shards": len(shards), "written": len(stale), "up_to_date": len(shards) - len(stale)}


def main(argv=None):
    parser = command_parser(INDEX_COMMAND, __doc__)
    parser.add_argument("data_dir", help="directory of train-*-of-* / validation-*-of-* TFRecord shards")
    parser.add_argument("--quiet", action="store_true", help="no line per index written")
    args = parser.parse_args(argv)
    try:
        counts = index_directory(args.data_dir, log=(lambda *_: None) if args.quiet else print)
    except (IndexFileError, OSError) as error:
        sys.exit(f"{INDEX_COMMAND}: error: {error}")
    print(f"{counts['shards']} shards in {args.data_dir}: {counts['written']} indexes written, "
          f"{counts['up_to_date']} already up to date")


if __name__ == "__main__":
    main()
