"""The Slurm bridge: Slurm drains, signals, requeues and resumes in step with node repairs.

``commands`` talks to Slurm (its own commands, parsed from stable field lists),
``decisions`` decides what to do for one node without I/O, ``bridge`` runs the loop.
"""
