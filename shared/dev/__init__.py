"""Services Tether starts as processes of its own, for the embedded default, local stacks, tests
and benchmarks: a private ``redis-server`` or Redis Cluster, a moto S3 server, and Celery worker
and beat processes. The producer's operator tools start them; the runtime, the run protocol and
the workers never import them (an import-linter contract holds it)."""
