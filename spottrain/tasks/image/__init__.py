"""The built-in image classifier: the engine's default task (``--task`` left empty).

:mod:`.settings` its task args (no TensorFlow), :mod:`.flags` the same as command-line
flags, :mod:`.data` its input, :mod:`.model` its model, :mod:`.task` the Task.
"""
