"""Storage: Delta tables, the SQL files and the stored embedding layout that every stage shares.

The storage API every other module goes through: :class:`~solaris.storage.table.Table` (one table,
its write rule, every read and write), :class:`~solaris.storage.events.Events` (the point-in-time
events reader) and :class:`~solaris.storage.audit.RunsLog` (the ``runs`` audit); each access runs on
the engine :func:`~solaris.storage.engine.choose_engine` names (Spark, or ``deltalake`` on the driver).
"""
