"""The operating system: process identity, the child's spawn, cgroups, reaping, the runtime directory's
files (paths, the record, the lock, the log). Imports only shellper.core."""
