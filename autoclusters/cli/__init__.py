"""The ``autoclusters`` command line. Each module here that defines ``register(subparsers)``
adds one subcommand; ``main`` discovers them, so a new command is one new module."""
