"""The set-based SQL files, shipped in the wheel as package data of ``solaris.queries``.

Rendered by :mod:`solaris.storage.sql` (``solaris.queries`` holds only the files, the renderer is code),
read with :mod:`importlib.resources` so an installed package finds them without the checkout.
"""
