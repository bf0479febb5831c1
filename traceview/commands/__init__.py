"""One module per `traceview` sub-command: `register(subparsers)` and `run(args)`."""
