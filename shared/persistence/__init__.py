"""Where sessions live: snapshot stores, event archives, live event streams, and their codec.

Each seam is a sub-package holding its Protocol (``base``) beside its backends (``memory``,
``local``, ``s3``, ``redis``).
"""
