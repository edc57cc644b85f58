"""The admission webhook: an async HTTPS server that asks OPA about maintenance labels.

``review`` turns AdmissionReviews into OPA inputs and OPA decisions into responses (pure);
``decider`` asks OPA; ``certs`` generates and rotates the serving certificate; ``server``
wires them into an aiohttp application with health and metrics endpoints.
"""
