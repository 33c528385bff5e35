"""Tokens, cost and per-tenant budgets: what each tenant used today, and its limits.

:mod:`~tether.settings.budgets` reads the budgets (``TETHER_TENANT_BUDGETS``);
:mod:`~tether.runs.usage.base` is the seam (:class:`TenantUsage`: count a finished run's usage
once, read a tenant's day, admit a submission under its budget), with an in-memory and a Redis
member; the run queue's finish counts each run's usage in the same round trip.
"""
