"""Safe tar extraction for the download script.

    python -m imagenet_prep.extract ARCHIVE DEST [--per_member_tar]

Refuses, before writing anything, an archive with a member that would land outside DEST (absolute
paths, `..`), or links, devices and other special files: an archive from the network must not be able
to write anywhere else. `--per_member_tar` handles ImageNet's training tarball, a tar of one tar per
class: each inner `<synset>.tar` is extracted into `DEST/<synset>/`.
"""
from __future__ import annotations

import os
import sys
import tarfile

from tfcnn.options import command_parser


class UnsafeArchiveError(ValueError):
    pass


def check_members(members, dest: str, archive: str) -> None:
    root = os.path.realpath(dest)
    for member in members:
        target = os.path.realpath(os.path.join(root, member.name))
        if os.path.isabs(member.name) or os.path.commonpath([root, target]) != root:
            raise UnsafeArchiveError(f"{archive}: member {member.name!r} would be written outside {dest}; nothing extracted")
        if not (member.isfile() or member.isdir()):
            raise UnsafeArchiveError(f"{archive}: member {member.name!r} is a link or special file; nothing extracted")


def safe_extract(archive, dest: str, name: str | None = None) -> int:
    """Extracts a tar (path or file object) into dest after checking every member. Returns the file count."""
    os.makedirs(dest, exist_ok=True)
    opener = tarfile.open(archive) if isinstance(archive, str) else tarfile.open(fileobj=archive)
    with opener as tar:
        members = tar.getmembers()
        check_members(members, dest, name or str(archive))
        tar.extractall(dest, members=members, filter="data")
    return sum(m.isfile() for m in members)


def extract_per_member_tar(archive: str, dest: str, log=print) -> int:
    """ImageNet's train tarball: `<synset>.tar` members, each extracted into dest/<synset>/."""
    total = 0
    with tarfile.open(archive) as outer:
        members = outer.getmembers()
        for index, member in enumerate(members, start=1):
            if not member.isfile() or not member.name.endswith(".tar"):
                raise UnsafeArchiveError(f"{archive}: expected only <class>.tar members, found {member.name!r}")
            synset = os.path.basename(member.name)[:-4]
            inner_dest = os.path.join(dest, synset)
            done_marker = os.path.join(inner_dest, ".extracted")
            if os.path.exists(done_marker):
                continue
            total += safe_extract(outer.extractfile(member), inner_dest, f"{archive}:{member.name}")
            open(done_marker, "w").close()
            if index % 50 == 0 or index == len(members):
                log(f"  {index}/{len(members)} classes extracted")
    return total


def main(argv=None):
    parser = command_parser("python -m imagenet_prep.extract", __doc__)
    parser.add_argument("archive")
    parser.add_argument("dest")
    parser.add_argument("--per_member_tar", action="store_true", help="a tar of <class>.tar archives")
    args = parser.parse_args(argv)
    try:
        count = (extract_per_member_tar(args.archive, args.dest) if args.per_member_tar
                 else safe_extract(args.archive, args.dest))
    except (UnsafeArchiveError, tarfile.TarError, OSError) as error:
        sys.exit(f"extract: error: {error}")
    print(f"extracted {count} files from {args.archive} into {args.dest}")


if __name__ == "__main__":
    main()
