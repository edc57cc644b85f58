"""``make demo``: a self-healing GPU pool on the local cluster, told as a story.

The demo starts the local control plane, deploys the system with ``pulumi up``, runs the
runtime (controller, detector, webhook) on the host under the service accounts the stack
created, injects Xid 79 through the detector's kernel-log path, and follows each repair
phase by phase: first under ``auto``, then under ``propose`` with an operator's approval.
"""
