"""The simulation, in one package: what stands in for GPU hosts and hardware on the local (kwok) cluster.

- ``nodes``: simulated GPU nodes (Node objects kwok manages) and the test that tells one apart
- ``hosts`` and ``kwok-stages.yaml``: their hosts (boot, reboot, heartbeat, a failing command)
- ``hardware``: the hardware a detector reads (kernel log, DCGM output, InfiniBand ports) in a spool
- ``fleet``: one detector process serving many simulated nodes from that spool
- ``provider``: the simulated repair provider (resets and replaces kwok nodes, refuses any other)

The product never imports this package except through two doors: the provider registry's
entry for the ``simulated`` provider type and the detector command's ``--simulate``
(tests/unit/test_layers.py).
"""
