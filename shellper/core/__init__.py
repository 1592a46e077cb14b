"""Pure rules and records, free of I/O: the ring, terminal modes, exit classification and restart policy,
session states, names, the config. Imports nothing of shellper but itself."""
