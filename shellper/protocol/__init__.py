"""The wire protocol, free of I/O: the frame codec and the client side of a connection (protocol/PROTOCOL.md)."""
