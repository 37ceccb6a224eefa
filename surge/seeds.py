"""Seeds of a run's components, all derived from the one `seed` of its config."""

from __future__ import annotations

import numpy as np


def derive_seed(seed: int, *keys: int | str) -> int:
    """A seed for one component, independent of the others (e.g. (seed, "env", actor, k, i))."""
    words = [seed] + [
        k if isinstance(k, int) else int.from_bytes(k.encode(), "little") for k in keys
    ]
    return int(np.random.SeedSequence([w % (2**63) for w in words]).generate_state(1)[0])
