"""Command line: one module per command group, each filling `register(subparsers)`."""
