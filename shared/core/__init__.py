"""The session's data: memory items, memory, events and the fold, snapshots and run results.

Pure values and functions with no I/O; every other layer of Tether builds on these.
"""
