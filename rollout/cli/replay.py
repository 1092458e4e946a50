"""``mjharness replay FILE --world W --episode E [--check]``: one episode of a rollout file simulated again.

    mjharness replay run.h5 --world 3 --episode 2 --check

The episode runs again from the file alone (``rollout.replay``): its start state and warm start
(``RolloutFile.episode_start``), the controls the run applied (``/ctrl``), the world's model fields, the file's
model, integrator and backend. ``--check`` compares the replayed states with the file's samples of the episode
(bit for bit on MuJoCo C): exit 0 when they are equal, 1 naming the first differing sample and state.
"""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help="simulate one episode of a rollout file again (and compare it with the file)",
                       description="Simulate episode E of world W of FILE again from the file alone (start state, "
                                   "warm start, recorded controls, model, integrator); --check compares the states.")
    p.add_argument("file")
    p.add_argument("--world", type=int, required=True, help="world index in the file (0..batch-1)")
    p.add_argument("--episode", type=int, required=True, help="episode index of that world (0: the first)")
    p.add_argument("--check", action="store_true",
                   help="compare with the file's samples (bit for bit on MuJoCo C); exit 1 if they differ")
    p.set_defaults(func=command, subject=lambda args: f"file {args.file}")


def command(args) -> int:
    from mjharness.rollout.replay import ReplayMismatchError, batch_invariant, open_rollout

    with open_rollout(args.file) as f:
        try:
            out = f.replay(args.world, args.episode, check=args.check)
        except ReplayMismatchError as e:
            print(f"mjharness replay: {e}")
            return 1
        steps = out["steps"]
        print(f"{args.file}: world {args.world} episode {args.episode}: replayed steps {int(steps.min())}.."
              f"{int(steps.max())} ({len(steps)} samples, t {out['time'][0]:.6g}..{out['time'][-1]:.6g} s) on "
              f"{f.attrs.get('backend')}")
        if args.check:
            exact = batch_invariant(f.attrs.get("backend"))
            print("  states identical to the file's" + (" bit for bit" if exact else " within rtol 1e-9"))
    return 0
