"""Local autoscaling: the policy (a pure function of the fleet signals) and the supervisor that
starts and stops worker processes on it (``tether autoscale``, ``tether up --autoscale``)."""
