"""Public Keras 3 examples (keras-io) brought to spottrain as their users would.

Each module reproduces one keras-io example's model, loss and step as the example
defines them (its path is in the module's docstring; the workplace keeps the
examples' own text out of this repository, so these are faithful re-writings, with
the example's architecture, customisation point and data shapes), the data as
synthetic arrays of the example's shapes (no downloads), and below a line
``# -- the port --`` the only lines a user adds: a ``KerasTask`` whose ``model()``
returns what the example compiles and whose ``examples()`` returns what the example
passes to ``model.fit``. ``PORT_LINES`` counts them.

``tests/integration/trainer/test_keras_io.py`` runs each through ``--check`` and a
2-worker SIGTERM and resume, and against the same model's ``model.fit``.
"""
