"""Fencing guards: make a resource reject a write whose token is older than one
it has already accepted.

A lease alone cannot guarantee exclusion (a holder paused past its ttl wakes
up believing it still holds the lease). The guard closes that gap at the
resource: it joins the caller's own write (like etcd's ``IsOwner()``
condition), it does not wrap it. ``ObjectFence`` publishes a whole output
(many objects) for a token on object storage, all or nothing.
"""

from .mongo import MongoFence
from .objects import FencedOutput, ObjectFence
from .redis import RedisFence
from .sql import SqlFence

__all__ = ["FencedOutput", "MongoFence", "ObjectFence", "RedisFence", "SqlFence"]
