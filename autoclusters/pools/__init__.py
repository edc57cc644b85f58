"""The pool model: a ``GpuNodePool`` parsed and written (``pool_config``), its Slurm settings
(``slurm_policy``), the cluster default policy for nodes whose pool label names no pool
(``default_pool``) and the membership rule, which pool a node belongs to (``membership``).

The controller, the operator's tools and the Slurm bridge read pools through it; the object
builders of ``deploy/`` (the CRD, the stack) write pools from it.
"""
