"""Operator tools on top of the client SDK: the ``tether`` CLI, the web console, batch
evaluation, the local stack (``tether up``), the embedded demo, session admin and tenant purge.

The client SDK itself (:class:`~tether.producer.client.Producer`,
:class:`~tether.producer.client_aio.AsyncProducer` and their handles) is
:mod:`tether.producer`; nothing in it imports this package.
"""
