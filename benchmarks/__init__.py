"""gnntrain's side-by-side benchmarks (issue #35): ``python -m benchmarks [SUITE ...] [--quick]``.

``harness`` holds what the suites share (results, rendering, interleaving, memory sampling),
``registry`` the ``@suite`` decorator, ``suites/`` one module per suite or family of suites.
Not part of the gnntrain wheel.
"""
