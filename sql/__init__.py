"""The set-based SQL files, shipped in the wheel as package data of ``solaris.queries``.

Rendered by :mod:`solaris.sql` (that name is the renderer module, hence the different package name),
read with :mod:`importlib.resources` so an installed package finds them without the checkout.
"""
