"""``mjharness verify FILE``: is a rollout file intact? Every chunk's checksum, the attributes, the digests.

    mjharness verify run.h5

Exit status 0 intact, 1 corrupt (each damaged dataset and chunk is named), 2 not a rollout file.
"""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("verify", help="check every chunk checksum, the attributes and the model digest of a file",
                       description="Read every chunk of every dataset of FILE (HDF5 Fletcher-32 checksums), its "
                                   "attributes, the model digest and the content digest. Exit 0 intact, 1 corrupt, "
                                   "2 not a rollout file.")
    p.add_argument("file")
    p.set_defaults(func=command, subject=lambda args: f"file {args.file}")


def command(args) -> int:
    from mjharness.rollout.h5.integrity import verify

    rep = verify(args.file)
    print(rep.summary())
    return rep.exit_code
