"""HDF5 rollout files (format version 2, version 1 read too; docs/files.md).

``format``: constants, ``FileSpec``, the file's layout and attribute encoding; ``layout``: the
``/layout`` table <-> ``StateLayout`` and the carry's rows and flat vector; ``model``: the lossless
binary model, its digest, rebuilding and comparing models; ``writer``: creating, extending and the
streaming writer thread (SWMR); ``reader``: ``open_rollout`` / ``RolloutFile``; ``errors``: the named
errors; ``lock``: one writer per file; ``digest``: the settings digest and the content hashes of every
object and block (``/integrity``); ``superblock``: reopening a file a killed writer left; ``integrity``:
``verify`` and ``repair``; ``tables``: tables as column groups; ``cf``: CF units, long names and global
attributes; ``provenance``: the source of the functions a run called; ``frames``: ``to_xarray``/``to_pandas``.
See docs/files.md and docs/verify.md.
"""

from .attrs import ctrl_attr, file_attrs, integrator_config, scene_name
from .create import create_rollout_file
from .episodes import cut_episodes, episode_table
from .errors import CorruptFileError, FileInUseError, FileNotReadyError, RolloutFileError, RolloutWriteError
from .format import FORMAT, FORMAT_VERSION, FileSpec, decode_attr
from .layout import (
    CARRY_UPDATE,
    carry_dict,
    carry_layout_from_table,
    carry_size,
    carry_vector,
    layout_from_table,
    layout_table,
)
from .lock import FileLock, check_not_in_use
from .model import model_differences, model_fields, model_from_mjb, model_mjb, model_sha256
from .reader import RolloutFile, open_rollout
from .resume import ResumeInfo, ResumePrefix, read_resume
from .writer import RolloutWriter, extend_rollout_file, open_for_write, write_episode_table

__all__ = ["RolloutWriter", "RolloutFile", "open_rollout", "create_rollout_file", "extend_rollout_file",
           "layout_table", "layout_from_table", "carry_layout_from_table", "carry_size", "carry_vector",
           "carry_dict", "CARRY_UPDATE", "model_mjb", "model_sha256", "model_from_mjb", "model_fields",
           "model_differences", "decode_attr", "FileSpec", "RolloutFileError", "FORMAT", "FORMAT_VERSION",
           "CorruptFileError", "FileInUseError", "FileNotReadyError", "RolloutWriteError", "FileLock",
           "check_not_in_use", "open_for_write", "ResumeInfo", "ResumePrefix",
           "read_resume", "file_attrs", "integrator_config", "ctrl_attr", "scene_name", "write_episode_table",
           "episode_table",
           "cut_episodes"]
