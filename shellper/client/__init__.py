"""Talking to a running shellper over its socket, and listing what a runtime directory holds.
Imports shellper.protocol, shellper.core and shellper.host."""
