"""Where sessions live: snapshot stores, event archives, live event streams, and their codec.

Each seam is a sub-package holding its Protocol (``base``) beside its backends (``memory``,
``local``, ``s3``, ``redis``): ``stores``, ``archives``, ``streams``, the live ``deltas``, the
``headcache``, and the ``blobs`` under the stores and archives. Beside them: the ``codec`` and
the storage layout (``objects``), saving a session (``saving``, ``journal``), the offline
``reader``, the Redis connections (``redis_conn``) and every Lua script (``lua``).
"""
