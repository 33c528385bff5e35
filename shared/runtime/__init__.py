"""The agent runtime: agents, sessions, the ReAct loop, tools, compaction and projection.

Runs in one process as a plain library (no Celery, no Redis); sessions save through the
persistence seams.
"""
