"""The default configuration, shipped in the wheel as package data of ``solaris.conf``.

``solaris.config.load_config`` reads ``solaris.yaml`` from here with :mod:`importlib.resources` when no
``--config`` / ``$SOLARIS_CONFIG`` is given, so an installed package finds it without the checkout.
"""
