"""``mjharness export FILE``: a rollout file's finished episodes as a LeRobot v3 or Minari dataset.

    mjharness export run.h5 --format minari --obs qpos,qvel --out ds/
    mjharness export run.h5 --format lerobot --obs qpos,qvel,sensordata --camera free --out ds_lerobot/

Every option is checked against the file (``mjharness.rollout.export.plan_export``) before anything is
written: one error paragraph, exit status 2. docs/datasets.md.
"""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="export a rollout file's episodes as a LeRobot v3 or Minari dataset",
                       description="Write the finished episodes of rollout FILE (one frame per control period: "
                                   "observation, the control held, reward, terminated/truncated) as a dataset in "
                                   "the new folder --out. A file still being written exports the episodes "
                                   "finished so far.")
    p.add_argument("file")
    # Checked by export() itself (one RolloutError naming the value), which the parser does not import.
    p.add_argument("--format", required=True, help="lerobot (v3: Parquet + meta/) or minari")
    p.add_argument("--obs", default="qpos,qvel",
                   help="observations, comma-separated: qpos, qvel, x, named states, recorded outputs "
                        "(default %(default)s)")
    p.add_argument("--camera", help="lerobot: render observation.images.<camera> (free, track:<body> or a "
                                    "camera of the model)")
    p.add_argument("--size", default="320x240", help="lerobot video frame WIDTHxHEIGHT (default %(default)s)")
    p.add_argument("--name", help="minari: the dataset id (default <file stem>-v0)")
    p.add_argument("--task", help="lerobot: the task string (default the scene's name)")
    p.add_argument("--out", required=True, help="the dataset folder (new or empty)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=command, subject=lambda args: f"file {args.file}")


def command(args) -> int:
    from mjharness.rollout.export import export

    path = export(args.file, args.out, format=args.format, obs=args.obs, camera=args.camera, name=args.name,
                  size=args.size, task=args.task, progress=not args.no_progress)
    print(f"export: {path}")
    return 0
