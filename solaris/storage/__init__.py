"""Storage: Delta tables, the SQL files and the stored embedding layout that every stage shares."""
