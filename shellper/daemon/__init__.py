"""The shellper process: its event loop, its connections, the session, and how it is launched.
Imports the layers below it, never shellper.client or shellper.cli."""
