"""``python -m tether.producer.ops.cli``: the ``tether`` command without its console script."""

from tether.producer.ops.cli import main

main()
