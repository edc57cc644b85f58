"""The autoclusters Pulumi program (``pulumi up`` in this directory); see docs/deploy.md."""

from components.stack import program

program()
