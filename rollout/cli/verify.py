"""``mjharness verify FILE``: is a rollout file intact? Every object, attribute, dimension scale and chunk.

    mjharness verify run.h5
    mjharness verify --repair killed.h5     # a killed run's file: readable by every reader (h5clear -s)

Exit status 0 intact, 1 corrupt (each damaged object, chunk, block or shard is named), 2 not a rollout file.
"""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("verify", help="check every object, attribute, dimension scale and chunk of a file",
                       description="Read every object of FILE and compare it with the content hashes recorded when it "
                                   "was written (every dataset's values and chunks, every attribute and dimension "
                                   "scale), the HDF5 chunk checksums, the model and settings digests and, for a joined "
                                   "file, its shards. Exit 0 intact, 1 corrupt, 2 not a rollout file.")
    p.add_argument("file")
    p.add_argument("--repair", action="store_true",
                   help="first clear the open-for-write mark a killed run's writer left (what h5clear -s does), so "
                        "every HDF5 reader opens the file; refused while a writer holds the file")
    p.set_defaults(func=command, subject=lambda args: f"file {args.file}")


def command(args) -> int:
    from mjharness.rollout.h5.integrity import repair, verify

    if args.repair:
        print(repair(args.file))
    rep = verify(args.file)
    print(rep.summary())
    return rep.exit_code
