"""Examples that ship with mjharness (``mjharness examples`` lists them). Each file's docstring names the
commands it is made for; ``--controller arm_reach:make`` and ``--terminate humanoid_fall:fallen`` name a
bundled example's function without a path (``examples/arm_reach.py:make`` works in a checkout too)."""
