"""``python -m tether.producer.cli``: the ``tether`` command without its console script."""

from tether.producer.cli import main

main()
