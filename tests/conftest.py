"""Settings every unit test shares.

Hypothesis fails an example that takes longer than its deadline (200 ms by default) and cannot
be repeated as slow. On two cores that CI's lanes keep busy, a planning example has taken 276 ms:
the time says nothing of the property tested, so no deadline applies unless a test sets one
(the fuzz tests do, for decoders that must stay fast on any input).
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("shared-cores", deadline=None)
settings.load_profile("shared-cores")
