"""End (or restart) a humanoid's episode when its torso drops below a height.

    mjharness run humanoid --terminate humanoid_fall:fallen --on-terminate reset --reset-to draw

The humanoid's first joint is its free root: ``x[2]`` is the torso's height (1.28 m standing). With
``--on-terminate reset`` a fallen world starts a new episode (a fresh draw of the initial perturbation with
``--reset-to draw``); the file's ``/episode`` and ``/episodes`` record the episodes.
"""

HEIGHT = 0.8  # metres


def fallen(t, x):
    return x[2] < HEIGHT
