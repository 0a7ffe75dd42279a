"""The occupancy log: one record per process lifetime on a GPU, kept on the node.

``tracker.OccupancyTracker`` folds every scan into in-memory records;
``store.HistoryStore`` keeps them in SQLite (WAL mode, bounded by age and by
size); ``log.HistoryLog`` ties the two together with a writer thread that
flushes in batches. Import the modules themselves.
"""
